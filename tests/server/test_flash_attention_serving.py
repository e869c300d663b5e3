"""--flash-attention at serve time on the trained demo model's GGUF: auto serves plain attention in the streams
layout where this device measured it faster and answers as flash attention does; ``off`` where plain attention
cannot run is refused before anything loads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from edgeopt.runtimes.llama_cpp import attention
from edgeopt.runtimes.llama_cpp.attention import AttentionTiming

from edgeopt.store.bundle import load_bundle
from edgeopt.engine import SamplingParams
from edgeopt.errors import ConfigError
from edgeopt.server.startup.launcher import (
    ServeOptions,
    load_served_model,
    serve_bundle,
    serving_shape,
)
from tests.fixtures.demo_gguf import optimize_demo_gguf


@pytest.fixture(scope="module")
def bundle(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return optimize_demo_gguf(demo_model_dir, tmp_path_factory.mktemp("flash-attention") / "demo-f16kv", "f16")


def greedy_answer(bundle: Path, options: ServeOptions) -> tuple[bool | None, list[int]]:
    manifest = load_bundle(bundle)
    served = load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)
    try:
        prompt = served.tokenizer.encode("Once upon a time, in a small village by the sea,")
        greedy = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)

        async def answer():
            return await served.engine.add_request("a", prompt, greedy).collect()

        result = asyncio.run(answer())
        return served.runtime.flash_attention, list(result.token_ids)
    finally:
        served.engine.shutdown()


def test_auto_serves_the_attention_measured_faster_with_the_same_answer(bundle: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"memory_bytes": 1 << 30, "context": 256, "max_concurrency": 2, "threads": 1, "kv_layout": "streams",
            "speculative": "off"}  # the kernels alone (a drafted step moves the logits' last bits too)
    flash, flash_tokens = greedy_answer(bundle, ServeOptions(flash_attention="on", **base))
    monkeypatch.setattr(attention, "saved_timings",  # this device: plain attention twice as fast a step
                        lambda *args: (AttentionTiming(0.2, 0.010), AttentionTiming(0.2, 0.005)))
    plain, plain_tokens = greedy_answer(bundle, ServeOptions(**base))
    assert (flash, plain) == (True, False)
    assert plain_tokens == flash_tokens


def test_off_in_the_unified_pool_is_refused_before_loading(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        serve_bundle(bundle, ServeOptions(flash_attention="off", kv_layout="unified", port=0))
    assert "--flash-attention off needs the streams KV layout" in err.value.message
    assert "--kv-layout streams" in err.value.hint
