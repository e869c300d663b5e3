"""The load generator against a live server over the fake runtime, and the report's arithmetic."""

from __future__ import annotations

import math

import pytest

from edgeopt.bench.loadgen import LoadResult, RequestSample, covered_seconds, run_load
from edgeopt.bench.serve_bench import ratios
from edgeopt.bench.stats import percentile, summarize
from tests.server.conftest import MODEL, serve_fake  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(120)


def test_percentile_is_nearest_rank():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(samples, 50) == 3.0 and percentile(samples, 99) == 5.0 and percentile(samples, 1) == 1.0
    assert math.isnan(percentile([], 50))
    assert summarize([0.1, 0.2])["p50_ms"] == pytest.approx(100.0)


async def test_run_load_counts_every_token(serve_fake):  # noqa: F811
    live = serve_fake(step_delay_s=0.002)
    result = await run_load(live.url, MODEL, concurrency=4, requests=8, prompt_tokens=10, max_tokens=12)
    assert result.errors == []
    assert len(result.samples) == 8 and result.completion_tokens == 8 * 12
    report = result.to_dict()
    assert report["ttft"]["count"] == 8 and report["itl"]["count"] > 0 and report["tokens_per_s"] > 0
    assert all(s.prompt_tokens == 6 * 10 + 1 for s in result.samples)  # byte tokenizer: " hello" x10 + BOS


async def test_run_load_reports_http_errors(serve_fake):  # noqa: F811
    live = serve_fake()
    result = await run_load(live.url, "no-such-model", concurrency=2, requests=3, prompt_tokens=1, max_tokens=2)
    assert len(result.errors) == 3 and "404" in result.errors[0] and result.samples == []


def test_ratios_compare_decode_rates():
    out = {"server": [{"concurrency": 16, "tokens_per_s": 50.0, "decode_tokens_per_s": 90.0}],
           "baseline": {"tokens_per_s": 20.0, "decode_tokens_per_s": 30.0}, "raw": {"tokens_per_s": 100.0},
           "raw_single": {"tokens_per_s": 40.0}}
    assert ratios(out, 16) == {"server_over_raw": 0.9, "server_over_one_at_a_time": 3.0,
                               "raw_batched_over_raw_single": 2.5}
    assert ratios({"server": [], "baseline": None, "raw": None}, 16)["server_over_raw"] is None


def test_decode_rate_of_requests_side_by_side_counts_only_the_window_where_all_decode():
    # Request A's first token comes at 0.5 s, B's at 1.5 s (B's prefill ran meanwhile); both then
    # get a token every 0.125 s until 2.5 s. Only (1.5, 2.5] has both decoding: 8 chunks each in it.
    a = RequestSample(0.5, [0.125] * 16, 2.5, 4, 17, first_at=0.5, end_at=2.5)
    b = RequestSample(1.5, [0.125] * 8, 2.5, 4, 9, first_at=1.5, end_at=2.5)
    result = LoadResult(concurrency=2, requests=2, wall_s=2.5, samples=[a, b])
    assert result.decode_tokens_per_s == pytest.approx(16 / 1.0)
    assert result.tokens_per_s == pytest.approx(26 / 2.5)


def test_decode_rate_of_requests_one_at_a_time_is_tokens_over_time_decoding():
    assert covered_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    # Served one after the other: 10 tokens after the first over 2 s, then 4 over 1 s; the gap
    # between them (the second one's prefill) is not decoding time.
    samples = [RequestSample(0.5, [0.2] * 10, 2.5, 4, 11, first_at=0.5, end_at=2.5),
               RequestSample(3.5, [0.25] * 4, 4.5, 4, 5, first_at=3.5, end_at=4.5)]
    result = LoadResult(concurrency=2, requests=2, wall_s=4.5, samples=samples)
    assert result.decode_tokens_per_s == pytest.approx(14 / 3.0)


def test_decode_rates_count_tokens_not_chunks():
    """Two requests side by side, 11 tokens each but only 3 text chunks (bytes held back mid-character, or a
    server sending text every few ms): both rates count the 20 tokens after the first ones over the 2 s."""
    samples = [RequestSample(ttft_s=0.1, itl_s=[1.0, 1.0], e2e_s=2.1, prompt_tokens=1, completion_tokens=11,
                             first_at=10.0, end_at=12.0) for _ in range(2)]
    result = LoadResult(concurrency=2, requests=2, wall_s=2.1, samples=samples)
    assert result.decoded_tokens_per_s == pytest.approx(20 / 2.0)
    assert result.decode_tokens_per_s == pytest.approx(20 / 2.0)
    assert result.to_dict()["itl"]["p50_ms"] == pytest.approx(1000 / 5)  # a 1 s gap between chunks of 5 tokens


def test_window_rate_weighs_each_chunk_by_its_requests_tokens_per_chunk():
    """One request sends every token, the other every fifth: in the window where both decode (from the later
    first token to the earlier end) each chunk counts its own request's tokens."""
    every = RequestSample(0.1, [0.1] * 20, 2.6, 1, 21, first_at=0.0, end_at=2.5)
    fifths = RequestSample(0.1, [0.5] * 4, 2.6, 1, 21, first_at=0.0, end_at=2.5)
    result = LoadResult(concurrency=2, requests=2, wall_s=2.6, samples=[every, fifths])
    assert result.decode_tokens_per_s == pytest.approx((20 * 1 + 4 * 5) / 2.5)
