"""Where built demo models live, and the build-once protocol (lock, temp dir, rename).

The cache root is ``$EDGEOPT_DEMO_CACHE``, else ``$EDGEOPT_CACHE``, else ~/.cache/edgeopt. The demo
model has its own variable because the test suite points ``EDGEOPT_CACHE`` at a per-session temp dir
(to isolate pass caches) but must reuse one trained demo model across sessions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

# Written last into a finished build: its presence is what "built" means.
DONE_MARKER = "demo_recipe.json"


def demo_cache_root() -> Path:
    configured = os.environ.get("EDGEOPT_DEMO_CACHE") or os.environ.get("EDGEOPT_CACHE")
    root = Path(configured) if configured else Path.home() / ".cache" / "edgeopt"
    root.mkdir(parents=True, exist_ok=True)
    return root


def is_built(directory: Path, marker: str = DONE_MARKER) -> bool:
    return (directory / marker).is_file()


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Serialise builds of the same key across processes (parallel test runs train once, not N times)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; the rename below still keeps builds atomic
        yield
        return
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(final: Path, build: Callable[[Path], object], marker: str = DONE_MARKER) -> Path:
    """Return ``final``, running ``build(tmp_dir)`` and renaming tmp_dir to ``final`` if not yet built.

    ``build`` writes ``marker`` last. An interrupted build leaves only a dot-prefixed temp dir (removed on
    the way out), never a directory that :func:`is_built` accepts.
    """
    if is_built(final, marker):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(final.parent / f".{final.name}.lock"):
        if is_built(final, marker):  # another process finished it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            build(tmp)
            if not is_built(tmp, marker):
                raise RuntimeError(f"build in {tmp} did not write {marker}")
            if final.exists():  # a stale, unfinished directory from an older layout
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
