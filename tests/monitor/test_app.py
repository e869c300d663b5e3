"""The dashboard driven with textual's Pilot against a real HTTP server whose metrics the test controls."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from edgeopt.monitor.app import MonitorApp
from edgeopt.server.startup.serve_process import free_port
from tests.monitor.fake_server import FakeServer
from tests.monitor.screen import next_polls, screen_text, wait_until

REFRESH_S = 0.2


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer().start()
    yield server
    server.stop()


def line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), "")


async def test_figures_on_screen_follow_the_server(fake_server: FakeServer) -> None:
    app = MonitorApp(fake_server.url, refresh_s=REFRESH_S, window_s=5)
    async with app.run_test(size=(100, 30)) as pilot:
        await next_polls(pilot, 2)
        before = screen_text(app)
        assert "● connected" in before and "done 0" in before
        assert re.search(r"TTFT p50\s+–", before)  # nothing observed yet

        fake_server.metrics.set(requests_running=2, requests_waiting=1, kv_cache_used_tokens=300,
                                kv_cache_capacity_tokens=1200, process_rss_bytes=300 * 2**20,
                                memory_budget_bytes=1200 * 2**20)
        for _ in range(4):
            fake_server.metrics.finish_request(prompt=12, generated=20, ttft=0.04, itl=0.008)
        fake_server.active = [{"request_id": "cmpl-live-1", "state": "decoding", "prompt_tokens": 12,
                               "generated_tokens": 7, "elapsed_s": 1.5}]
        await next_polls(pilot, 2)
        after = screen_text(app)

    assert "done 4" in after
    assert re.search(r"TTFT p50\s+\d+\.\dms", after), line_with(after, "TTFT")
    assert re.search(r"ITL\s+p50\s+\d+\.\dms", after), line_with(after, "ITL")
    assert "running 2  waiting 1" in after
    assert "300 / 1,200 tok  25%" in after
    assert "300.0 MiB / 1.2 GiB  25%" in after
    assert "cmpl-live-1" in line_with(after, "decoding")
    assert app.figures.generation_tokens_per_s is not None


async def test_unreachable_server_is_shown_and_reconnected_when_it_comes_up() -> None:
    port = free_port()
    app = MonitorApp(f"http://127.0.0.1:{port}", refresh_s=REFRESH_S)
    server = FakeServer(port)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await next_polls(pilot, 2)
            assert "✖ cannot reach" in screen_text(app)
            assert "connection refused" in screen_text(app)
            server.start()
            await wait_until(pilot, lambda: "● connected" in screen_text(app), what="reconnect")
            server.stop()
            await wait_until(pilot, lambda: "✖ cannot reach" in screen_text(app), what="down again")
    finally:
        server.stop()


async def test_a_restarted_server_never_shows_negative_rates(fake_server: FakeServer) -> None:
    app = MonitorApp(fake_server.url, refresh_s=REFRESH_S)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(3):
            fake_server.metrics.finish_request(prompt=50, generated=100, ttft=0.1, itl=0.01)
        await next_polls(pilot, 2)
        fake_server.restart_with_fresh_counters()
        await next_polls(pilot, 3)
        text = screen_text(app)
    assert "● connected" in text and "done 0" in text
    assert app.figures.generation_tokens_per_s is None or app.figures.generation_tokens_per_s >= 0
    assert not re.search(r"tok/s\s+-\d", text)


async def test_malformed_metrics_are_reported_without_crashing(fake_server: FakeServer) -> None:
    fake_server.metrics_override = ("# TYPE edgeopt_requests_running gauge\nedgeopt_requests_running 3\n"
                                    "# TYPE edgeopt_kv_cache_used_tokens gauge\nedgeopt_kv_cache_used_tokens ???\n")
    fake_server.requests_status = 500
    app = MonitorApp(fake_server.url, refresh_s=REFRESH_S)
    async with app.run_test(size=(120, 30)) as pilot:
        await next_polls(pilot, 2)
        text = screen_text(app)
        fake_server.metrics_override = "<html>502 Bad Gateway</html>"
        await next_polls(pilot, 2)
        garbage_text = screen_text(app)
    assert "running 3" in text
    assert "1 malformed metric(s)" in text and "HTTP 500" in text
    assert "detail unavailable" in text
    assert "● connected" in garbage_text and "running –" in garbage_text


async def test_keys_pause_reset_and_quit(fake_server: FakeServer) -> None:
    fake_server.metrics.finish_request(prompt=5, generated=5, ttft=0.1, itl=0.01)
    app = MonitorApp(fake_server.url, refresh_s=REFRESH_S)
    async with app.run_test(size=(100, 30)) as pilot:
        await next_polls(pilot, 1)
        assert "done 1" in screen_text(app)

        await pilot.press("p")
        assert "paused" in screen_text(app)
        polls_when_paused = app.polls_done
        fake_server.metrics.finish_request(prompt=5, generated=5, ttft=0.1, itl=0.01)
        await pilot.pause(4 * REFRESH_S)
        assert app.polls_done <= polls_when_paused + 1  # at most the poll already in flight
        assert "done 1" in screen_text(app)

        await pilot.press("p")
        await next_polls(pilot, 1)
        assert "done 2" in screen_text(app)

        await pilot.press("p", "r")  # paused, so no poll can refill the screen before we look
        await pilot.pause()
        assert "done –" in screen_text(app) and app.window.history.series("tokens_per_s") == []
        await pilot.press("p")
        await next_polls(pilot, 1)
        assert "done 2" in screen_text(app)

        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
