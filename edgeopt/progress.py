"""Progress bars for the long steps of the model path (conversion, evaluation), on stderr.

Shown only on an interactive terminal, so logs, pipes and tests stay clean; ``EDGEOPT_PROGRESS=0``
turns them off, ``=1`` forces them on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def _enabled() -> bool:
    setting = os.environ.get("EDGEOPT_PROGRESS")
    if setting is not None:
        return setting not in ("0", "false", "no")
    return sys.stderr.isatty()


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items`` while a bar advances one step per item."""
    if not _enabled():
        yield from items
        return
    from rich.console import Console
    from rich.progress import track

    yield from track(items, description=description, total=total, console=Console(stderr=True), transient=True)


@contextmanager
def counted(description: str) -> Iterator[Callable[[int, int], None]]:
    """A bar for a step that counts its own work (a build tool's ``[done/total]``, the total known only once it
    starts): call the yielded function with both whenever they change."""
    if not _enabled():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
