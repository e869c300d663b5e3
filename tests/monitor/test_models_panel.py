"""The Models panel and the requests table's model column: shown for a server of several models only."""

from __future__ import annotations

from edgeopt.monitor.client import Poll
from edgeopt.monitor.metrics_parse import RequestRow, parse_metrics
from edgeopt.monitor.model_figures import ModelFigures
from edgeopt.monitor.models_panel import ModelsPanel
from edgeopt.monitor.window import Figures
from tests.monitor.fake_server import FakeMetrics
from tests.monitor.scenes import scene_app
from tests.monitor.screen import screen_text
from tests.monitor.several_models import MIB, SeveralModels

CHAT = ModelFigures("smollm2-135m", loaded=True, resident_bytes=512 * MIB, running=2, waiting=1, ttft_p50=0.045,
                    generation_tokens_per_s=31.25, loads=3, unloads=2, cache_restores=1, load_failures=0)
EMBED = ModelFigures("a-very-long-embedding-model-name", loaded=False, loads=1, unloads=1, load_failures=1)


def test_rows_show_state_bytes_against_the_budget_queue_latency_rate_and_loads() -> None:
    panel = ModelsPanel(window_s=10)
    panel.models, panel.budget_bytes = (CHAT, EMBED), 1024 * MIB
    header, chat, embed = panel.lines(76).splitlines()
    assert header.split() == ["model", "state", "held", "of", "budget", "run", "wait", "TTFT", "p50", "tok/s",
                              "load/unl"]
    assert chat.split()[:2] == ["smollm2-135m", "loaded"]
    assert " ██░░ " in chat  # half the budget, on the 4 cells left by the long name (cut to 16)
    assert chat.split()[-7:] == ["512.0", "MiB", "2", "1", "45.0ms", "31.2", "3/2"]
    assert embed.startswith("a-very-long-emb…") and "unloaded" in embed and "█" not in embed
    assert embed.split()[-6:] == ["–", "–", "–", "–", "–", "1/1"]
    assert all(len(line) == 76 for line in (header, chat, embed))
    panel.models = (CHAT,)
    narrow, wide = panel.lines(76).splitlines()[1], panel.lines(120).splitlines()[1]
    assert narrow.startswith("smollm2-135m loaded ") and " ████░░░░ " in narrow  # short name: 8 cells
    assert len(wide) == 120 and "█" * 26 + "░" * 26 in wide  # the bar takes the extra width


def test_the_summary_sums_bytes_held_and_names_rare_events() -> None:
    figures = Figures(models=(CHAT, EMBED), models_budget_bytes=1024 * MIB)
    assert ModelsPanel.summary(figures) == "512.0 MiB of 1.0 GiB held 50% · caches restored 1 · failed loads 1"
    quiet = Figures(models=(ModelFigures("x", loaded=False),), models_budget_bytes=MIB)
    assert ModelsPanel.summary(quiet) == "0 B of 1.0 MiB held 0%"


def several_models_poll(server: SeveralModels) -> Poll:
    rows = [RequestRow("cmpl-aa01", "decoding", 120, 30, 1.5, model="chat-a"),
            RequestRow("cmpl-bb02", "waiting", 64, 0, 0.2, model="chat-b")]
    return Poll(parse_metrics(server.text()), rows)


async def test_dashboard_of_several_models_at_80x24_then_one_model_after_a_restart() -> None:
    server = SeveralModels(("chat-a", "chat-b", "embed"))
    engine = server.load("chat-a", 700 * MIB)
    server.load("chat-b", 300 * MIB)
    app = scene_app()
    async with app.run_test(size=(80, 24)) as pilot:
        for step in range(3):
            engine.running, engine.generated_tokens_total = 2, 40 * step
            server.first_token("chat-a", 0.04)
            app.apply_poll(several_models_poll(server), now=float(step))
        await pilot.pause()
        several = screen_text(app)
        single = FakeMetrics()  # the server came back serving one model: rows no longer name one
        app.apply_poll(Poll(parse_metrics(single.text()), [RequestRow("cmpl-cc03", "decoding", 5, 1, 0.1)]), now=3.0)
        await pilot.pause()
        one = screen_text(app)

    lines = several.splitlines()
    assert any("Models · last 10s" in line for line in lines), several
    assert any("1000.0 MiB of 2.0 GiB held 49%" in line for line in lines), several
    chat_a = next(line for line in lines if "chat-a" in line and "loaded" in line)
    assert "700.0 MiB" in chat_a and "40.0" in chat_a and "1/0" in chat_a  # 80 tokens over 2s
    assert any("embed" in line and "unloaded" in line for line in lines), several
    assert any("cmpl-aa01" in line and "chat-a" in line for line in lines), several  # the request's model
    assert any(" model " in line and "state" in line and "prompt" in line for line in lines), several
    assert "Models" not in one and "cmpl-cc03" in one
    header = next(line for line in one.splitlines() if "request" in line and "state" in line)
    assert " model " not in header
