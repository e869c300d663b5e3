"""Windowed percentiles, rates, restarts and history, with a clock the test controls."""

from __future__ import annotations

import pytest

from edgeopt.monitor.metrics_parse import MetricsSnapshot, parse_metrics
from edgeopt.monitor.window import MetricsWindow
from tests.monitor.fake_server import FakeMetrics


def scrape(metrics: FakeMetrics) -> MetricsSnapshot:
    return parse_metrics(metrics.text())


def test_first_scrape_shows_gauges_but_no_rates_or_recent_latency() -> None:
    metrics = FakeMetrics()
    metrics.set(requests_running=2, requests_waiting=1, kv_cache_used_tokens=300, kv_cache_capacity_tokens=1200,
                process_rss_bytes=5e8, memory_budget_bytes=2e9)
    metrics.finish_request(prompt=4, generated=3, ttft=0.2, itl=0.01)
    figures = MetricsWindow(window_s=10).add(scrape(metrics), now=100.0)
    assert figures.running == 2 and figures.waiting == 1
    assert figures.kv_usage_ratio == pytest.approx(0.25)
    assert figures.rss_bytes == 5e8 and figures.memory_budget_bytes == 2e9
    assert figures.generation_tokens_per_s is None
    assert figures.ttft.p50 is None  # old observations are not "recent"
    assert figures.requests_total == 1
    assert figures.kv_cache_kind is None  # a server that does not say


def test_the_kv_cache_kind_comes_from_the_info_metric_labels() -> None:
    metrics = FakeMetrics()
    metrics.kv_cache("q8_0", "streams")
    assert MetricsWindow(window_s=10).add(scrape(metrics), now=0.0).kv_cache_kind == "q8_0 · streams"


def test_percentiles_cover_only_observations_since_the_window_base() -> None:
    metrics = FakeMetrics()
    for _ in range(50):  # slow history that must not count
        metrics.finish_request(prompt=4, generated=2, ttft=4.0, itl=0.8)
    window = MetricsWindow(window_s=10)
    window.add(scrape(metrics), now=0.0)
    for _ in range(10):
        metrics.finish_request(prompt=4, generated=2, ttft=0.007, itl=0.003)
    figures = window.add(scrape(metrics), now=1.0)
    assert figures.ttft.observations == 10
    assert 0.005 < figures.ttft.p50 <= 0.01  # inside the (0.005, 0.01] bucket
    assert figures.ttft.p95 <= 0.01
    assert figures.itl.p50 <= 0.005
    assert figures.e2e.p50 is not None and figures.e2e.p50 <= 0.025


def test_window_base_moves_forward_so_old_bursts_age_out() -> None:
    metrics = FakeMetrics()
    window = MetricsWindow(window_s=5)
    window.add(scrape(metrics), now=0.0)
    metrics.finish_request(prompt=1, generated=2, ttft=2.0, itl=0.5)
    assert window.add(scrape(metrics), now=1.0).ttft.observations == 1
    for t in range(2, 6):  # idle polls; the base stays the newest scrape at least 5s old (t=0)
        figures = window.add(scrape(metrics), now=float(t))
    assert figures.ttft.observations == 1
    figures = window.add(scrape(metrics), now=6.0)  # base moves to t=1, which already held the burst
    assert figures.ttft.observations == 0 and figures.ttft.p50 is None


def test_tokens_per_second_comes_from_counter_deltas_between_polls() -> None:
    metrics = FakeMetrics()
    window = MetricsWindow()
    window.add(scrape(metrics), now=10.0)
    metrics.finish_request(prompt=30, generated=40, ttft=0.1, itl=0.01)
    figures = window.add(scrape(metrics), now=12.0)
    assert figures.generation_tokens_per_s == pytest.approx(20.0)
    assert figures.prompt_tokens_per_s == pytest.approx(15.0)
    figures = window.add(scrape(metrics), now=13.0)
    assert figures.generation_tokens_per_s == 0.0


def test_a_server_restart_drops_baselines_instead_of_showing_negative_rates() -> None:
    before = FakeMetrics()
    for _ in range(5):
        before.finish_request(prompt=10, generated=10, ttft=0.1, itl=0.01)
    window = MetricsWindow()
    window.add(scrape(before), now=0.0)
    after = FakeMetrics()  # fresh process: counters start at zero
    after.finish_request(prompt=10, generated=3, ttft=0.1, itl=0.01)
    figures = window.add(scrape(after), now=1.0)
    assert figures.generation_tokens_per_s is None
    assert figures.ttft.p50 is None
    after.finish_request(prompt=10, generated=3, ttft=0.1, itl=0.01)
    figures = window.add(scrape(after), now=2.0)
    assert figures.generation_tokens_per_s == pytest.approx(3.0)
    assert figures.ttft.observations == 1


def test_missing_metrics_are_none_not_errors() -> None:
    figures = MetricsWindow().add(parse_metrics("# TYPE other gauge\nother 1\n"), now=0.0)
    assert figures.running is None and figures.kv_usage_ratio is None and figures.rss_bytes is None
    zero_capacity = parse_metrics("# TYPE edgeopt_kv_cache_used_tokens gauge\nedgeopt_kv_cache_used_tokens 0\n"
                                  "# TYPE edgeopt_kv_cache_capacity_tokens gauge\nedgeopt_kv_cache_capacity_tokens 0\n")
    assert MetricsWindow().add(zero_capacity, now=0.0).kv_usage_ratio is None


def test_history_records_each_poll_and_reset_forgets_everything() -> None:
    metrics = FakeMetrics()
    window = MetricsWindow(history_length=3)
    for t in range(5):
        metrics.finish_request(prompt=1, generated=t + 2, ttft=0.1, itl=0.01)
        window.add(scrape(metrics), now=float(t))
    tokens = window.history.series("tokens_per_s")
    assert tokens == [4.0, 5.0, 6.0]  # tokens generated per 1s poll at t=2,3,4; older ones dropped
    window.reset()
    assert window.history.series("tokens_per_s") == []
    assert window.add(scrape(metrics), now=10.0).generation_tokens_per_s is None


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="-1"):
        MetricsWindow(window_s=-1)


def test_a_split_servers_workers_come_from_their_labelled_gauges() -> None:
    from edgeopt.monitor.widgets import MemoryPanel

    text = ('# TYPE edgeopt_worker_memory_used_bytes gauge\n'
            'edgeopt_worker_memory_used_bytes{worker="127.0.0.1:50053"} 6.3e7\n'
            'edgeopt_worker_memory_used_bytes{worker="127.0.0.1:50052"} 6.0e7\n'
            '# TYPE edgeopt_worker_memory_bytes gauge\n'
            'edgeopt_worker_memory_bytes{worker="127.0.0.1:50053"} 7.34003e7\n'
            'edgeopt_worker_memory_bytes{worker="127.0.0.1:50052"} 7.34003e7\n'
            '# TYPE edgeopt_worker_round_trip_seconds gauge\n'
            'edgeopt_worker_round_trip_seconds{worker="127.0.0.1:50052"} 0.0002\n')
    figures = MetricsWindow(window_s=10).add(parse_metrics(text), now=0.0)
    assert [w.name for w in figures.workers] == ["127.0.0.1:50052", "127.0.0.1:50053"]
    first, second = figures.workers
    assert first.used_bytes == 6.0e7 and first.offered_bytes == 7.34003e7 and first.round_trip_s == 0.0002
    assert second.round_trip_s is None
    line = MemoryPanel.workers_line(figures).splitlines()[0]
    assert "127.0.0.1:50052" in line and "57.2 MiB of 70.0 MiB" in line and "82%" in line and "200µs" in line
    assert MetricsWindow(window_s=10).add(parse_metrics(""), now=0.0).workers == ()
