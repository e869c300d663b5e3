"""Soak: random lengths, random client aborts, intended bad requests; afterwards the KV cache is empty,
no unintended error was answered, the runtime contract was never broken, and RSS stayed flat."""

from __future__ import annotations

import time

import pytest

from tests.server.soak import run_soak


def _check_soak(live, report, requests: int) -> None:
    assert not report.unexpected, report.unexpected[:5]
    assert sum(report.outcomes.values()) == requests, report.outcomes
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stats = live.state.engine_stats()
        if stats.running == stats.waiting == stats.kv_used_tokens == 0:
            break
        time.sleep(0.05)
    stats = live.state.engine_stats()
    assert (stats.running, stats.waiting, stats.kv_used_tokens) == (0, 0, 0), stats
    assert live.runtime.kv_used_tokens == 0, "the runtime still holds KV after the soak"
    assert live.runtime.violations == []
    print(f"\nsoak {requests}: {dict(report.outcomes)}; RSS {report.rss_after_warmup / 2**20:.1f} -> "
          f"{report.rss_end / 2**20:.1f} MiB ({100 * report.rss_growth:+.2f}%)")


@pytest.mark.timeout(300)
async def test_soak_small(serve_fake):
    live = serve_fake(context_length=256, kv_capacity_tokens=1024, max_slots=8)
    report = await run_soak(live.url, requests=100, concurrency=8, context=256, seed=1, warmup=30)
    _check_soak(live, report, 100)
    assert report.outcomes["stream_abort"] + report.outcomes["aborted"] > 0, "the soak must abort some requests"
    assert report.rss_growth < 0.05


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_soak_500_requests(serve_fake):
    live = serve_fake(context_length=256, kv_capacity_tokens=1024, max_slots=16, step_delay_s=0.002)
    report = await run_soak(live.url, requests=500, concurrency=16, context=256, seed=2, warmup=100)
    _check_soak(live, report, 500)
    assert report.rss_growth < 0.05
