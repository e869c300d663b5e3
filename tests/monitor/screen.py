"""Test helpers: read the dashboard's screen as plain text, and wait for polls without sleeping blindly."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot


def screen_text(app: App) -> str:
    """The screen as a person sees it, one line per terminal row (what export_screenshot draws, as text)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))  # same source as App.export_screenshot
    return console.export_text()


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout_s: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or condition}\n"
                                 f"{screen_text(pilot.app)}")
        await pilot.pause(0.05)


async def next_polls(pilot: Pilot, count: int = 1, timeout_s: float = 15.0) -> None:
    """Wait until ``count`` more polls have been applied to the screen."""
    app = pilot.app
    target = app.polls_done + count
    await wait_until(pilot, lambda: app.polls_done >= target, timeout_s, f"{count} more poll(s)")
    await pilot.pause()  # let the widgets repaint
