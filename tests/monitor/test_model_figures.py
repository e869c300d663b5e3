"""Per-model rows from the server's own per-model series, over a window and a clock the test controls."""

from __future__ import annotations

import pytest

from edgeopt.monitor.metrics_parse import parse_metrics
from edgeopt.monitor.window import MetricsWindow
from tests.monitor.fake_server import FakeMetrics
from tests.monitor.several_models import MIB, SeveralModels


def add(window: MetricsWindow, server: SeveralModels, now: float):
    return window.add(parse_metrics(server.text()), now)


def test_a_row_per_model_of_the_catalog_in_the_servers_order() -> None:
    server = SeveralModels(("chat-b", "chat-a", "embed"))
    engine = server.load("chat-a", 600 * MIB, restored_cache=True)
    engine.running, engine.waiting = 2, 1
    figures = add(MetricsWindow(window_s=10), server, now=0.0)
    assert [m.name for m in figures.models] == ["chat-b", "chat-a", "embed"]
    chat_b, chat_a, _ = figures.models
    assert chat_a.loaded and chat_a.resident_bytes == 600 * MIB
    assert (chat_a.running, chat_a.waiting, chat_a.loads, chat_a.unloads) == (2, 1, 1, 0)
    assert chat_a.cache_restores == 1 and chat_a.load_failures == 0
    assert not chat_b.loaded and chat_b.resident_bytes is None and chat_b.running is None
    assert figures.models_budget_bytes == 2048 * MIB
    assert chat_a.ttft_p50 is None and chat_a.generation_tokens_per_s is None  # one scrape: nothing recent yet


def test_ttft_p50_covers_only_the_models_first_tokens_in_the_window() -> None:
    server = SeveralModels(("fast", "slow"))
    server.load("fast", MIB), server.load("slow", MIB)
    for _ in range(20):  # old, slow first tokens of "fast" that must not count
        server.first_token("fast", 4.0)
    window = MetricsWindow(window_s=10)
    add(window, server, now=0.0)
    for _ in range(5):
        server.first_token("fast", 0.02)
        server.first_token("slow", 0.8)
    fast, slow = add(window, server, now=1.0).models
    assert 0.01 < fast.ttft_p50 <= 0.025  # inside the (0.01, 0.025] bucket
    assert 0.5 < slow.ttft_p50 <= 1.0  # its first observations appeared after the base: all recent
    fast, slow = add(window, server, now=12.0).models  # the base moves past the burst
    assert fast.ttft_p50 is None and slow.ttft_p50 is None


def test_tokens_per_second_over_the_window_survives_a_reload_between_scrapes() -> None:
    server = SeveralModels(("a", "b"))
    engine = server.load("a", MIB)
    engine.generated_tokens_total = 100
    window = MetricsWindow(window_s=10)
    add(window, server, now=0.0)
    engine.generated_tokens_total = 140
    add(window, server, now=1.0)
    server.unload("a")
    engine = server.load("a", MIB)  # reloaded: its counter starts again from zero
    engine.generated_tokens_total = 30
    a, b = add(window, server, now=2.0).models
    assert a.generation_tokens_per_s == pytest.approx((40 + 30) / 2.0)
    assert (a.loads, a.unloads) == (2, 1)
    assert b.generation_tokens_per_s is None  # never loaded in the window
    server.unload("a")
    a, _ = add(window, server, now=4.0).models
    assert not a.loaded and a.generation_tokens_per_s == pytest.approx(70 / 4.0)  # what it made still counts


def test_a_single_model_server_has_no_model_rows() -> None:
    metrics = FakeMetrics()
    metrics.finish_request(prompt=4, generated=3, ttft=0.2, itl=0.01)
    figures = MetricsWindow(window_s=10).add(parse_metrics(metrics.text()), now=0.0)
    assert figures.models == () and figures.models_budget_bytes is None
    # Its per-model TTFT histogram (labelled with its one model's name) does not make it a server of several.
    labelled = ('# TYPE edgeopt_model_time_to_first_token_seconds histogram\n'
                'edgeopt_model_time_to_first_token_seconds_bucket{le="+Inf",model="only"} 1\n'
                'edgeopt_model_time_to_first_token_seconds_count{model="only"} 1\n'
                'edgeopt_model_time_to_first_token_seconds_sum{model="only"} 0.1\n')
    assert MetricsWindow(window_s=10).add(parse_metrics(labelled), now=0.0).models == ()
