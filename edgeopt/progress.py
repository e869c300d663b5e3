"""Progress of the long steps of the model path (conversion, text generation, importance matrix, quantization,
evaluation...), on stderr.

On an interactive terminal: a bar with a rate and an ETA. Elsewhere (a log, a pipe, CI): one line per step when it
ends, with its count and seconds, so a log shows where the minutes went without a line per item. ``edgeopt
optimize --quiet`` or ``EDGEOPT_PROGRESS=0`` turn both off; ``=1`` forces the bars on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


BAR, LINES, OFF = "bar", "lines", "off"


def quiet() -> None:
    """No progress at all for the rest of the process (``--quiet``)."""
    os.environ["EDGEOPT_PROGRESS"] = "0"


def _mode() -> str:
    setting = os.environ.get("EDGEOPT_PROGRESS")
    if setting is not None:
        return OFF if setting in ("0", "false", "no") else BAR
    return BAR if sys.stderr.isatty() else LINES


def _enabled() -> bool:
    return _mode() == BAR


def _done_line(description: str, done: int, total: int | None, started: float) -> None:
    count = f"{done}/{total}" if total is not None else str(done)
    print(f"{description}: {count} in {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items`` while a bar advances one step per item (off a terminal: one line when they are done)."""
    mode = _mode()
    if mode == OFF:
        yield from items
        return
    if mode == LINES:
        started, done = time.perf_counter(), 0
        total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)
        try:
            for item in items:
                yield item
                done += 1
        finally:  # also when the caller stops early (a break closes the generator)
            _done_line(description, done, total, started)
        return
    from rich.console import Console
    from rich.progress import track

    yield from track(items, description=description, total=total, console=Console(stderr=True), transient=True)


@contextmanager
def counted(description: str) -> Iterator[Callable[[int, int], None]]:
    """A bar for a step that counts its own work (a build tool's ``[done/total]``, the total known only once it
    starts): call the yielded function with both whenever they change."""
    mode = _mode()
    if mode == OFF:
        yield lambda done, total: None
        return
    if mode == LINES:
        started, seen = time.perf_counter(), [0, None]

        def note(done: int, total: int) -> None:
            seen[:] = [done, total]

        yield note
        _done_line(description, seen[0], seen[1], started)
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def stage(description: str) -> Iterator[None]:
    """A step with no count of its own (a library call that runs minutes: optimum's export, a quantizer): a
    spinner with the time so far on a terminal, a line with its seconds when it ends elsewhere."""
    mode = _mode()
    if mode == OFF:
        yield
        return
    if mode == LINES:
        started = time.perf_counter()
        yield
        print(f"{description}: done in {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        bar.add_task(description, total=None)
        yield
