"""The 500-request soak on a real llama.cpp runtime (the default-suite soak uses the fake runtime):
random lengths, streams, client aborts and intended bad requests leave no KV held by the engine or by
llama.cpp, answer no unintended error, and keep RSS flat."""

from __future__ import annotations

import time

import pytest

from edgeopt.bundle import load_bundle
from edgeopt.server.app import create_app
from edgeopt.server.launcher import ServeOptions, load_served_model, size_kv
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
    sizing = size_kv(bundle, manifest, options)
    served = load_served_model(bundle, manifest, sizing, options)
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
        print(f"\nllama.cpp soak 500: {dict(report.outcomes)}; RSS {report.rss_after_warmup / 2**20:.1f} -> "
              f"{report.rss_end / 2**20:.1f} MiB ({100 * report.rss_growth:+.2f}%)")
        assert report.rss_growth < 0.05
    finally:
        live.stop()
        served.engine.shutdown()
