"""The paged continuous-batching engine (the CUDA path of ``--runtime torch``).

transformers' paged kernels have CPU fallbacks (``sdpa_paged``), so the engine runs here on CPU against
the real ContinuousBatchingManager; the same test runs on a GPU with ``-m cuda``. On CPU transformers
cannot query device memory for its footprint check (it returns None), so the CPU case supplies 1 GiB.
Greedy output is compared with transformers' ``generate`` on the same checkpoint.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgeopt.bundle import load_bundle
from edgeopt.engine.api import EngineConfig, SamplingParams
from edgeopt.errors import RequestError
from runtimes.torch import paged_compat
from runtimes.torch.paged import load_paged_runtime
from tests.runtimes.test_torch_serve import transformers_greedy
from tests.runtimes.torch_bundles import make_torch_bundle

pytestmark = pytest.mark.timeout(300)
CONFIG = EngineConfig(kv_capacity_tokens=1024, max_running=4, context_length=256, step_token_budget=128)


@pytest.fixture(scope="module")
def bundle(tiny_llama_dir: Path, tmp_path_factory) -> Path:
    return make_torch_bundle(tiny_llama_dir, tmp_path_factory.mktemp("paged") / "b")


def start_engine(bundle: Path, device: str, monkeypatch: pytest.MonkeyPatch):
    if device == "cpu":
        from transformers.generation.continuous_batching import cache as cb_cache

        monkeypatch.setattr(cb_cache.PagedAttentionMemoryHandler, "get_available_memory",
                            staticmethod(lambda max_memory_percent=1.0: 1 << 30))
    runtime = load_paged_runtime(bundle, load_bundle(bundle), dtype="auto", kv_capacity_tokens=CONFIG.kv_capacity_tokens,
                                 max_slots=CONFIG.max_running, context_length=CONFIG.context_length, device=device,
                                 threads=2)
    engine = runtime.create_engine(CONFIG)
    engine.start()
    return runtime, engine


async def run_requests(engine, prompts: list[list[int]], params: SamplingParams):
    streams = [engine.add_request(f"r{i}", p, params) for i, p in enumerate(prompts)]
    return [await s.collect() for s in streams]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_paged_engine_greedy_output_equals_generate(bundle: Path, tiny_llama_dir: Path, device: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, engine = start_engine(bundle, device, monkeypatch)
    prompts = [[5, 17, 99, 42], [7, 8, 9], [300, 301, 302, 303, 304, 305]]
    eos = next(iter(runtime.info.eos_token_ids))
    try:
        outputs = asyncio.run(run_requests(engine, prompts, SamplingParams(temperature=0, max_tokens=10)))
        stats = engine.stats()
    finally:
        engine.shutdown()
    for prompt, out in zip(prompts, outputs):
        want = transformers_greedy(tiny_llama_dir, prompt, 10, eos)
        assert [t for t in out.token_ids if t != eos] == want
        assert out.finish_reason == ("stop" if len(want) < 10 else "length")
        assert out.prompt_tokens == len(prompt)
    assert stats.kv_capacity_tokens == CONFIG.kv_capacity_tokens
    assert stats.generated_tokens_total == sum(len(o.token_ids) for o in outputs)


def test_paged_cache_is_sized_by_our_kv_budget(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, engine = start_engine(bundle, "cpu", monkeypatch)
    try:
        asyncio.run(run_requests(engine, [[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2)))
        cache = engine._manager.manager.batch_processor.cache
        assert cache.num_blocks == CONFIG.kv_capacity_tokens // paged_compat.PAGE_SIZE
        assert cache.max_batch_tokens == CONFIG.step_token_budget
    finally:
        engine.shutdown()


@pytest.mark.parametrize("params, name", [
    (SamplingParams(temperature=0, seed=3), "seed"),
    (SamplingParams(temperature=0, repetition_penalty=1.2), "repetition_penalty"),
    (SamplingParams(temperature=0, logit_bias={5: 2.0}), "logit_bias"),
])
def test_parameters_the_paged_engine_cannot_honour_are_refused_by_name(params: SamplingParams, name: str) -> None:
    with pytest.raises(RequestError, match=name) as info:
        paged_compat.check_unsupported(params)
    assert info.value.param == name


def test_sampling_needs_per_request_processors_or_is_refused() -> None:
    params = SamplingParams(temperature=0.7, top_k=40, top_p=0.9)
    if paged_compat.has_per_request_sampling():
        assert paged_compat.sampling_kwargs(params, 512) == {"temperature": 0.7, "top_k": 40, "top_p": 0.9}
    else:
        with pytest.raises(RequestError, match="temperature=0.7") as info:
            paged_compat.check_global_greedy(params)
        assert info.value.param == "temperature"


def test_a_failed_paged_step_ends_its_requests_with_error_and_health_sees_it(
        bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a failed forward pass is an "error" (a 500 / SSE error for the client), never an "abort"
    (a client disconnect). transformers' manager stops after a failed forward, so the engine then says it
    is not running, which /health turns into a 503."""
    runtime, engine = start_engine(bundle, "cpu", monkeypatch)

    def broken_forward(*args, **kwargs):  # noqa: ANN002, ANN003 - stands in for any model.forward
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    try:
        assert engine.is_running
        monkeypatch.setattr(runtime.model, "forward", broken_forward)
        [out] = asyncio.run(run_requests(engine, [[5, 6, 7]], SamplingParams(temperature=0, max_tokens=4)))
        assert out.finish_reason == "error" and "illegal memory access" in (out.error or "")
        engine._manager.manager._generation_thread.join(timeout=30)
        assert not engine.is_running
    finally:
        engine.shutdown()
