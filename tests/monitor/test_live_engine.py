"""The dashboard against the real server app and engine (behind real uvicorn) over the deterministic fake
runtime, slowed down so requests are visibly in flight: the request table and the queue figures
must show them while they run and drop them when they finish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from edgeopt.monitor.app import MonitorApp
from edgeopt.server.app import create_app
from edgeopt.server.state import ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.monitor.screen import next_polls, screen_text, wait_until
from tests.server.conftest import MODEL, fake_served_model
from tests.server.live import LiveServer, start_live_server

IN_FLIGHT = 3


@pytest.fixture
def slow_server() -> Iterator[LiveServer]:
    runtime = FakeRuntime(step_delay_s=0.03, max_slots=IN_FLIGHT)
    app = create_app(ServerSettings(model_names=(MODEL,), memory_budget_bytes=1 << 30),
                     served=fake_served_model(runtime))
    live = start_live_server(app)
    yield live
    live.stop()


async def test_requests_in_flight_appear_in_the_table_and_leave_it(slow_server: LiveServer) -> None:
    app = MonitorApp(slow_server.url, refresh_s=0.2, window_s=30)
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    async with app.run_test(size=(100, 30)) as pilot, httpx.AsyncClient(base_url=slow_server.url,
                                                                         timeout=60) as http:
        await next_polls(pilot, 1)
        assert "0 active" in screen_text(app)
        pending = [asyncio.create_task(http.post("/v1/completions", json=body)) for _ in range(IN_FLIGHT)]
        await wait_until(pilot, lambda: f"{IN_FLIGHT} active" in screen_text(app), what="rows in the table")
        during = screen_text(app)
        # /metrics and the request list are two GETs: the gauges may lag the table by one poll.
        await wait_until(pilot, lambda: (app.figures.running or 0) > 0, what="running > 0")
        kv_during = app.figures.kv_used_tokens
        answers = await asyncio.gather(*pending)
        await wait_until(pilot, lambda: "0 active" in screen_text(app), what="the table to empty")
        await next_polls(pilot, 1)
        after = screen_text(app)

    assert [a.status_code for a in answers] == [200] * IN_FLIGHT
    rows = [line.split() for line in during.splitlines() if "cmpl-" in line]
    assert len(rows) == IN_FLIGHT, during
    assert all(row[2] in ("waiting", "prefilling", "decoding") for row in rows), during
    assert kv_during and kv_during > 0
    assert f"done {IN_FLIGHT}" in after and "running 0" in after
    assert app.figures.kv_used_tokens == 0
    assert app.figures.ttft.observations == IN_FLIGHT
