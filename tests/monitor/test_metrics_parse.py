"""Parsing /metrics text and the request-detail JSON: exact values, tolerance to garbage."""

from __future__ import annotations

import math

import pytest

from edgeopt.monitor.metrics_parse import Histogram, parse_metrics, parse_requests
from tests.monitor.fake_server import FakeMetrics


def test_reads_gauges_counters_and_labelled_counters_from_real_exposition() -> None:
    metrics = FakeMetrics()
    metrics.set(requests_running=3, kv_cache_used_tokens=128, kv_cache_capacity_tokens=1024)
    metrics.finish_request(prompt=10, generated=5, ttft=0.02, itl=0.004, reason="stop")
    metrics.finish_request(prompt=7, generated=2, ttft=0.03, itl=0.004, reason="length")
    metrics.errors.labels(status="429").inc(2)

    snap = parse_metrics(metrics.text())

    assert snap.problems == ()
    assert snap.value("edgeopt_requests_running") == 3
    assert snap.value("edgeopt_kv_cache_capacity_tokens") == 1024
    assert snap.value("edgeopt_prompt_tokens_total") == 17
    assert snap.value("edgeopt_generation_tokens_total") == 7
    assert snap.value("edgeopt_requests_total") == 2  # summed over finish_reason
    assert snap.by_label["edgeopt_requests_total"] == {"finish_reason=stop": 1, "finish_reason=length": 1}
    assert snap.value("edgeopt_request_errors_total") == 2
    assert snap.value("edgeopt_prompt_tokens_created") is None  # timestamps are not figures
    ttft = snap.histograms["edgeopt_time_to_first_token_seconds"]
    assert ttft.count == 2 and ttft.total == pytest.approx(0.05)
    assert math.isinf(ttft.bounds[-1]) and ttft.cumulative[-1] == 2


def test_quantile_interpolates_within_the_bucket_like_prometheus() -> None:
    # 10 observations in (0, 1], 10 in (1, 2]: the median is at the 1.0 boundary, p75 halfway into (1, 2].
    hist = Histogram(bounds=(1.0, 2.0, math.inf), cumulative=(10, 20, 20), count=20, total=25)
    assert hist.quantile(0.5) == pytest.approx(1.0)
    assert hist.quantile(0.75) == pytest.approx(1.5)
    assert hist.quantile(0.25) == pytest.approx(0.5)
    assert hist.mean == pytest.approx(1.25)


def test_quantile_in_the_inf_bucket_is_clamped_to_the_highest_finite_bound() -> None:
    hist = Histogram(bounds=(1.0, 2.0, math.inf), cumulative=(0, 1, 10), count=10, total=100)
    assert hist.quantile(0.95) == 2.0


def test_quantile_of_an_empty_histogram_is_unknown_and_bad_q_is_refused() -> None:
    empty = Histogram(bounds=(1.0, math.inf), cumulative=(0, 0), count=0, total=0)
    assert empty.quantile(0.5) is None
    assert empty.mean is None
    with pytest.raises(ValueError, match="1.5"):
        empty.quantile(1.5)


def test_minus_gives_the_observations_in_between_and_refuses_a_reset() -> None:
    before = Histogram(bounds=(1.0, math.inf), cumulative=(5, 8), count=8, total=6.0)
    after = Histogram(bounds=(1.0, math.inf), cumulative=(5, 12), count=12, total=16.0)
    delta = after.minus(before)
    assert delta == Histogram(bounds=(1.0, math.inf), cumulative=(0, 4), count=4, total=10.0)
    assert before.minus(after) is None  # counts went down: the server restarted
    other_buckets = Histogram(bounds=(2.0, math.inf), cumulative=(5, 8), count=8, total=6.0)
    assert after.minus(other_buckets) is None


def test_one_malformed_family_is_reported_and_the_rest_still_parse() -> None:
    text = (
        "# TYPE edgeopt_requests_running gauge\n"
        "edgeopt_requests_running 2\n"
        "# TYPE edgeopt_requests_waiting gauge\n"
        "edgeopt_requests_waiting not-a-number\n"
        "# TYPE edgeopt_kv_cache_used_tokens gauge\n"
        "edgeopt_kv_cache_used_tokens 40\n"
    )
    snap = parse_metrics(text)
    assert snap.value("edgeopt_requests_running") == 2
    assert snap.value("edgeopt_kv_cache_used_tokens") == 40
    assert snap.value("edgeopt_requests_waiting") is None
    assert len(snap.problems) == 1 and "edgeopt_requests_waiting" in snap.problems[0]


@pytest.mark.parametrize("garbage", ["", "<html>502 Bad Gateway</html>", "{{{{", "\x00\x01", "# TYPE x histogram\nx_bucket{le=\"oops\"} 1\n"])
def test_garbage_never_raises(garbage: str) -> None:
    snap = parse_metrics(garbage)
    assert snap.value("edgeopt_requests_running") is None
    assert snap.histograms == {}


def test_non_finite_samples_are_ignored() -> None:
    snap = parse_metrics("# TYPE edgeopt_process_rss_bytes gauge\nedgeopt_process_rss_bytes NaN\n")
    assert snap.value("edgeopt_process_rss_bytes") is None


def test_histogram_with_decreasing_cumulative_counts_is_rejected() -> None:
    text = ('# TYPE h histogram\nh_bucket{le="1.0"} 5\nh_bucket{le="+Inf"} 3\nh_count 3\nh_sum 1\n')
    snap = parse_metrics(text)
    assert "h" not in snap.histograms
    assert any("h:" in p for p in snap.problems)


def test_request_rows_skip_malformed_entries() -> None:
    payload = {"requests": [
        {"request_id": "cmpl-1", "state": "decoding", "prompt_tokens": 12, "generated_tokens": 3, "elapsed_s": 0.5},
        {"state": "waiting"},  # no id: what a caller without the admin key sees
        {"request_id": "cmpl-2", "prompt_tokens": "many"},  # not a number
        "not a row",
    ], "stats": {}}
    rows = parse_requests(payload)
    assert [r.request_id for r in rows] == ["cmpl-1", "(hidden)"]
    assert rows[0].generated_tokens == 3 and rows[0].elapsed_s == 0.5
    assert parse_requests(["not", "a", "dict"]) == []
    assert parse_requests({"requests": None}) == []


def test_a_labelled_histogram_is_kept_per_label_and_summed() -> None:
    text = ('# TYPE edgeopt_model_time_to_first_token_seconds histogram\n'
            'edgeopt_model_time_to_first_token_seconds_bucket{le="0.1",model="chat-a"} 3\n'
            'edgeopt_model_time_to_first_token_seconds_bucket{le="+Inf",model="chat-a"} 4\n'
            'edgeopt_model_time_to_first_token_seconds_count{model="chat-a"} 4\n'
            'edgeopt_model_time_to_first_token_seconds_sum{model="chat-a"} 1.5\n'
            'edgeopt_model_time_to_first_token_seconds_bucket{le="0.1",model="qwen2.5:0.5b"} 0\n'
            'edgeopt_model_time_to_first_token_seconds_bucket{le="+Inf",model="qwen2.5:0.5b"} 2\n'
            'edgeopt_model_time_to_first_token_seconds_count{model="qwen2.5:0.5b"} 2\n'
            'edgeopt_model_time_to_first_token_seconds_sum{model="qwen2.5:0.5b"} 3.0\n'
            '# TYPE edgeopt_model_loaded gauge\n'
            'edgeopt_model_loaded{model="chat-a"} 1\n'
            'edgeopt_model_loaded{model="qwen2.5:0.5b"} 0\n')
    snap = parse_metrics(text)
    assert snap.problems == ()
    per_model = snap.histograms_by("model", "edgeopt_model_time_to_first_token_seconds")
    assert set(per_model) == {"chat-a", "qwen2.5:0.5b"}
    assert per_model["chat-a"].cumulative == (3, 4) and per_model["chat-a"].total == pytest.approx(1.5)
    assert per_model["qwen2.5:0.5b"].count == 2
    assert snap.histograms["edgeopt_model_time_to_first_token_seconds"].count == 6
    assert snap.by("model", "edgeopt_model_loaded") == {"chat-a": 1.0, "qwen2.5:0.5b": 0.0}
    assert snap.by("model", "edgeopt_model_resident_bytes") == {}
    assert parse_metrics("").histograms_by("model", "edgeopt_model_time_to_first_token_seconds") == {}


def test_a_labelled_histogram_before_its_first_observation_is_not_malformed() -> None:
    # Every server exposes edgeopt_model_time_to_first_token_seconds with no sample until a request is answered.
    text = ("# HELP edgeopt_model_time_to_first_token_seconds by model\n"
            "# TYPE edgeopt_model_time_to_first_token_seconds histogram\n"
            "# TYPE edgeopt_requests_running gauge\nedgeopt_requests_running 1\n")
    snap = parse_metrics(text)
    assert snap.problems == ()
    assert snap.histograms == {} and snap.labelled_histograms == {}
    assert snap.value("edgeopt_requests_running") == 1


def test_request_rows_name_their_model_when_the_server_does() -> None:
    payload = {"requests": [
        {"request_id": "cmpl-1", "state": "decoding", "prompt_tokens": 1, "generated_tokens": 1, "elapsed_s": 0.1,
         "model": "chat-a"},
        {"request_id": "cmpl-2", "state": "waiting", "prompt_tokens": 1, "generated_tokens": 0, "elapsed_s": 0.1},
    ]}
    assert [row.model for row in parse_requests(payload)] == ["chat-a", None]
