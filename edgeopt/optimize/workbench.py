"""A directory one optimize run keeps its working files in, removed when the run ends (however it ends).

What lives there: the unquantized GGUF the export converts the checkpoint to (an 8B: 16 GB), which the
evaluation then reads as its reference instead of loading the original in float32. It is never part of the step
cache (a copy per run would fill the disk) and never part of the bundle. It sits under the cache root, on the disk
that already holds the checkpoints and the cached steps; a run killed before its cleanup leaves a directory named
with its process id, which the next run removes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgeopt.store.cache import cache_root

_PREFIX = "run-"


@contextmanager
def run_workbench() -> Iterator[Path]:
    root = cache_root() / "workbench"
    root.mkdir(exist_ok=True)
    _remove_abandoned(root)
    path = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_abandoned(root: Path) -> None:
    """Workbenches of runs whose process is gone (killed before their cleanup)."""
    for path in root.glob(f"{_PREFIX}*-*"):
        pid = path.name[len(_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True
