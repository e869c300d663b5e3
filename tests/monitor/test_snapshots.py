"""Snapshot tests of the layout (pytest-textual-snapshot). Update with: pytest tests/monitor --snapshot-update.

Each test also checks, in plain text, the things its docstring promises are visible, so a failure
says what went missing and not only that some pixels moved.
"""

from __future__ import annotations

from tests.monitor.scenes import play_busy_scene, scene_app
from tests.monitor.screen import screen_text

EVERYWHERE = (
    "● connected http://127.0.0.1:8000",
    "Latency · last 10s", "TTFT p50", "ITL  p50", "E2E  p50", "p95",
    "gen tok/s", "running 3  waiting 1", "done 24  errors 0  preempted 0",
    "KV cache", "/ 4,096 tok", "cached", "prefix cache served 38% of 1,600 prompt tok", "RSS", "/ 2.0 GiB",
    "KV q8_0 · streams",
    "cmpl-7f3a9c01", "prefilling", "4 active",
    "q Quit", "p Pause", "r Reset",
)


def check_visible(screens: list[str], extra: tuple[str, ...] = ()) -> None:
    text = screens[-1]
    missing = [item for item in EVERYWHERE + extra if item not in text]
    assert not missing, f"not on screen: {missing}\n{text}"


def test_layout_at_80x24(snap_compare) -> None:
    """80x24, a busy server: the status line (connected + URL); TTFT, ITL and E2E with p50 and p95 each
    followed by a sparkline; generated tokens/s with its sparkline; running/waiting and prompt tokens/s;
    done/errors/preempted; KV cache, prefix-cache ("cached") and RSS bars with used/capacity and percent,
    the share of prompt tokens the prefix cache served, and the KV type and layout under the memory panel; the
    active-requests table
    with its header and all four rows (two decoding, one prefilling, one waiting); the footer keys q p r.
    """
    screens: list[str] = []

    async def run_before(pilot) -> None:
        await play_busy_scene(pilot)
        screens.append(screen_text(pilot.app))

    assert snap_compare(scene_app(), terminal_size=(80, 24), run_before=run_before)
    check_visible(screens, extra=("cmpl-7f3a9c04",))


def test_layout_wide_160x40(snap_compare) -> None:
    """160x40: the same panels as at 80x24, with the two top panels side by side and their sparklines
    stretched to the extra width, the memory bars as wide as the terminal, and the request table
    showing all four rows with empty room below (nothing truncated anywhere).
    """
    screens: list[str] = []

    async def run_before(pilot) -> None:
        await play_busy_scene(pilot)
        screens.append(screen_text(pilot.app))

    assert snap_compare(scene_app(), terminal_size=(160, 40), run_before=run_before)
    check_visible(screens, extra=("cmpl-7f3a9c04", "prompt/s"))
