"""A fixed, busy dashboard for snapshot tests: the same scrapes at the same times on every run."""

from __future__ import annotations

from textual.pilot import Pilot

from edgeopt.monitor.app import MonitorApp
from edgeopt.monitor.client import Poll
from edgeopt.monitor.metrics_parse import RequestRow, parse_metrics
from tests.monitor.fake_server import FakeMetrics

SCENE_URL = "http://127.0.0.1:8000"
POLLS = 12


def scene_app() -> MonitorApp:
    """An app that never polls by itself; the scene feeds it."""
    return MonitorApp(SCENE_URL, refresh_s=1.0, window_s=10.0, autopoll=False)


def scene_rows(step: int) -> list[RequestRow]:
    return [
        RequestRow("cmpl-7f3a9c01", "decoding", 182, 40 + step, 2.4 + step),
        RequestRow("cmpl-7f3a9c02", "decoding", 64, 12 + step, 1.1 + step),
        RequestRow("cmpl-7f3a9c03", "prefilling", 1024, 0, 0.3),
        RequestRow("cmpl-7f3a9c04", "waiting", 96, 0, 0.1),
    ]


async def play_busy_scene(pilot: Pilot) -> None:
    """Twelve one-second polls of a server under a steady, varying load."""
    app = pilot.app
    assert isinstance(app, MonitorApp)
    metrics = FakeMetrics()
    metrics.set(memory_budget_bytes=2 * 2**30, kv_cache_capacity_tokens=4096)
    metrics.kv_cache("q8_0", "streams")
    for step in range(POLLS):
        for request in range(step % 3 + 1):
            metrics.finish_request(prompt=60 + 10 * request, generated=24 + step, ttft=0.02 + 0.015 * step,
                                   itl=0.004 + 0.001 * (step % 4))
            metrics.reuse_prefix(looked_up=60 + 10 * request, reused=50 if request else 0)
        metrics.set(requests_running=3, requests_waiting=1, kv_cache_used_tokens=1400 + 90 * step,
                    process_rss_bytes=(700 + 5 * step) * 2**20, prefix_cache_tokens=800 + 20 * step)
        app.apply_poll(Poll(parse_metrics(metrics.text()), scene_rows(step)), now=float(step))
    await pilot.pause()
