"""The load generator against a live server over the fake runtime, and the report's arithmetic."""

from __future__ import annotations

import math

import pytest

from edgeopt.bench.loadgen import run_load
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


def test_ratios():
    out = {"server": [{"concurrency": 16, "tokens_per_s": 90.0}], "baseline": {"tokens_per_s": 30.0},
           "raw": {"tokens_per_s": 100.0}}
    assert ratios(out, 16) == {"server_over_raw": 0.9, "server_over_one_at_a_time": 3.0}
    assert ratios({"server": [], "baseline": None, "raw": None}, 16)["server_over_raw"] is None
