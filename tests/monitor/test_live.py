"""The dashboard against a real ``edgeopt serve`` of a tiny GGUF bundle, started by edgeopt.server.startup.serve_process."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from edgeopt.monitor.app import MonitorApp
from edgeopt.server.startup.serve_process import launched_server
from tests.monitor.screen import next_polls, screen_text
from tests.server.gguf_bundle import make_gguf_bundle

SERVE_ARGS = ("--memory", "1GiB", "--max-concurrency", "4", "--context", "256")
REQUESTS = 4


@pytest.fixture(scope="module")
def tiny_bundle(tiny_gguf_factory, tiny_model_factory, tmp_path_factory) -> Path:
    return make_gguf_bundle(tiny_gguf_factory("llama-gqa", "Q8_0"), tiny_model_factory("llama-gqa"),
                            tmp_path_factory.mktemp("monitored") / "tiny-llama")


async def send_completions(base_url: str, count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
        body = {"model": model, "prompt": "import os\n", "max_tokens": 12, "temperature": 0}
        answers = await asyncio.gather(*(http.post("/v1/completions", json=body) for _ in range(count)))
    return [answer.status_code for answer in answers]


async def test_dashboard_figures_change_when_a_live_server_answers_requests(tiny_bundle: Path) -> None:
    with launched_server(tiny_bundle, threads=2, extra_args=SERVE_ARGS, startup_timeout_s=120) as server:
        app = MonitorApp(server.base_url, refresh_s=0.25, window_s=60)
        async with app.run_test(size=(100, 30)) as pilot:
            await next_polls(pilot, 2)
            idle = screen_text(app)
            idle_figures = app.figures

            assert await send_completions(server.base_url, REQUESTS) == [200] * REQUESTS
            await next_polls(pilot, 2)
            busy = screen_text(app)
            busy_figures = app.figures

    assert "● connected" in idle and "done 0" in idle
    assert re.search(r"TTFT p50\s+–", idle)
    assert idle_figures.kv_capacity_tokens and idle_figures.kv_capacity_tokens > 0
    assert idle_figures.rss_bytes and idle_figures.memory_budget_bytes == 2**30
    assert re.search(r"/ [\d,]+ tok", idle) and "/ 1.0 GiB" in idle

    assert f"done {REQUESTS}" in busy
    assert re.search(r"TTFT p50\s+\d+(\.\d+)?(ms|µs|s)", busy), busy
    assert re.search(r"E2E\s+p50\s+\d+(\.\d+)?(ms|µs|s)", busy), busy
    assert busy_figures.ttft.observations == REQUESTS
    assert busy_figures.e2e.observations == REQUESTS
    assert busy_figures.itl.observations > 0
    assert busy_figures.requests_total == REQUESTS
