"""The 500-request soak on a real llama.cpp runtime (the default-suite soak uses the fake runtime):
random lengths, streams, client aborts and intended bad requests leave no KV held by the engine or by
llama.cpp except the prefix cache's, answer no unintended error, and keep RSS flat; emptying the cache
(DELETE /v1/edgeopt/cache) gives every cached cell back and RSS stays within 5%."""

from __future__ import annotations

import gc
import time

import httpx
import psutil
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.server.app import create_app
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
from edgeopt.server.state import ServerSettings
from tests.server.conftest import MODEL
from tests.server.gguf_bundle import make_gguf_bundle
from tests.server.live import start_live_server
from tests.server.soak import run_soak

CONTEXT = 256


@pytest.mark.timeout(600)  # ~15 s on the tiny model: cheap enough for the default suite
async def test_soak_500_requests_on_llama_cpp(tiny_gguf_factory, tiny_model_factory, tmp_path):
    bundle = make_gguf_bundle(tiny_gguf_factory("llama-gqa", "Q8_0"), tiny_model_factory("llama-gqa"),
                              tmp_path / "tiny-llama")
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=1 << 30, context=CONTEXT, max_concurrency=16, threads=1)
    shape = serving_shape(bundle, manifest, options)
    sizing = shape.sizing
    served = load_served_model(bundle, manifest, shape, options)
    live = start_live_server(create_app(ServerSettings(model_names=(MODEL,), memory_budget_bytes=1 << 30),
                                        served=served))
    try:
        # Prompts of over 1000 bytes are the intended "too long" requests: even byte-pair merges
        # cannot squeeze them under the 256-token context.
        report = await run_soak(live.url, requests=500, concurrency=16, context=4 * CONTEXT, seed=3, warmup=100)
        assert not report.unexpected, report.unexpected[:5]
        assert sum(report.outcomes.values()) == 500, report.outcomes
        assert report.outcomes["stream_abort"] + report.outcomes["aborted"] > 0
        deadline = time.monotonic() + 30
        while live.state.engine_stats().running and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = live.state.engine_stats()
        assert (stats.running, stats.waiting, stats.kv_used_tokens) == (0, 0, 0), stats
        assert served.runtime.kv_cells_used() == 0, "llama.cpp still holds KV cells after the soak"
        assert stats.kv_cached_tokens > 0 and stats.prefix_cache_hits_total > 0, stats
        info = served.runtime.info
        cache_ids = range(info.max_slots, info.max_slots + info.cache_slots)
        assert 0 < max(served.runtime.held_tokens(i) for i in cache_ids) <= stats.kv_cached_tokens
        print(f"\nllama.cpp soak 500: {dict(report.outcomes)}; RSS {report.rss_after_warmup / 2**20:.1f} -> "
              f"{report.rss_end / 2**20:.1f} MiB ({100 * report.rss_growth:+.2f}%); cache {stats.kv_cached_tokens} "
              f"tokens, {stats.prefix_cache_hit_tokens_total} of {stats.prefix_cache_query_tokens_total} tokens reused")
        assert report.rss_growth < 0.05
        response = httpx.delete(f"{live.url}/v1/edgeopt/cache", timeout=30)
        assert response.json() == {"evicted_tokens": stats.kv_cached_tokens, "cached_tokens": 0}
        assert all(served.runtime.held_tokens(i) == 0 for i in cache_ids)
        gc.collect()
        rss_cleared = psutil.Process().memory_info().rss
        print(f"after DELETE /v1/edgeopt/cache: RSS {rss_cleared / 2**20:.1f} MiB "
              f"({100 * (rss_cleared / report.rss_after_warmup - 1):+.2f}% of after warm-up)")
        assert abs(rss_cleared / report.rss_after_warmup - 1) < 0.05
    finally:
        live.stop()
        served.engine.shutdown()
