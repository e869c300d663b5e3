"""The paged continuous-batching engine (the CUDA path of ``--runtime torch``).

transformers' paged kernels have CPU fallbacks, so the engine runs here on CPU against the real
ContinuousBatchingManager; the ``cuda`` cases run the same tests on a GPU (``pytest -m cuda``). On CPU
transformers cannot always query device memory for its footprint check, so the CPU case supplies 1 GiB.
Greedy output is compared with transformers' ``generate`` on the same checkpoint and device.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from edgeopt.backends import backend
from edgeopt.store.bundle import load_bundle
from edgeopt.engine.api import EngineConfig, SamplingParams
from edgeopt.errors import RequestError
from edgeopt.paged_batching import engine_for, paged_compat
from edgeopt.runtimes.torch.loading import pick_device
from edgeopt.runtimes.torch.paged import load_paged_runtime
from tests.runtimes.torch_bundles import make_torch_bundle

pytestmark = pytest.mark.timeout(300)
CONFIG = EngineConfig(kv_capacity_tokens=1024, max_running=4, context_length=256, step_token_budget=128)
CONFIG_16 = EngineConfig(kv_capacity_tokens=16 * 64, max_running=16, context_length=256, step_token_budget=256)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(scope="module")
def bundle(tiny_llama_dir: Path, tmp_path_factory) -> Path:
    return make_torch_bundle(tiny_llama_dir, tmp_path_factory.mktemp("paged") / "b")


def load_runtime(bundle: Path, device: str, monkeypatch: pytest.MonkeyPatch, config: EngineConfig = CONFIG):
    if device == "cpu":
        from transformers.generation.continuous_batching import cache as cb_cache

        monkeypatch.setattr(cb_cache.PagedAttentionMemoryHandler, "get_available_memory",
                            staticmethod(lambda max_memory_percent=1.0: 1 << 30))
    return load_paged_runtime(bundle, load_bundle(bundle), dtype="auto", kv_capacity_tokens=config.kv_capacity_tokens,
                              max_slots=config.max_running, context_length=config.context_length,
                              device=pick_device(device),
                              threads=2)


def start_engine(bundle: Path, device: str, monkeypatch: pytest.MonkeyPatch, config: EngineConfig = CONFIG):
    runtime = load_runtime(bundle, device, monkeypatch, config)
    engine = engine_for(runtime, config)
    engine.start()
    return runtime, engine


async def run_requests(engine, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]):
    each = params if isinstance(params, list) else [params] * len(prompts)
    streams = [engine.add_request(f"r{i}", p, q) for i, (p, q) in enumerate(zip(prompts, each))]
    return list(await asyncio.gather(*(s.collect() for s in streams)))


def generate_greedy(model_dir: Path, prompts: list[list[int]], max_tokens: int, eos_id: int,
                    device: str) -> list[list[int]]:
    """transformers' own ``generate`` on ``device``, one prompt at a time (no padding), cut at EOS."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    wanted = []
    with torch.inference_mode():
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=max_tokens, do_sample=False,
                                 eos_token_id=eos_id, pad_token_id=eos_id)
            generated = out[0, len(prompt):].tolist()
            wanted.append(generated[:generated.index(eos_id)] if eos_id in generated else generated)
    return wanted


def check_greedy(outputs, prompts: list[list[int]], wanted: list[list[int]], eos: int, max_tokens: int) -> None:
    for prompt, out, want in zip(prompts, outputs, wanted):
        assert [t for t in out.token_ids if t != eos] == want, prompt
        assert out.finish_reason == ("stop" if len(want) < max_tokens else "length")
        assert out.prompt_tokens == len(prompt)


@pytest.mark.parametrize("device", DEVICES)
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
    check_greedy(outputs, prompts, generate_greedy(tiny_llama_dir, prompts, 10, eos, device), eos, 10)
    assert stats.kv_capacity_tokens == CONFIG.kv_capacity_tokens
    assert stats.generated_tokens_total == sum(len(o.token_ids) for o in outputs)


@pytest.mark.parametrize("device", DEVICES)
def test_sixteen_concurrent_greedy_requests_each_equal_generate(bundle: Path, tiny_llama_dir: Path, device: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """16 requests of different lengths in one continuous batch: each one's tokens are its solo ``generate``."""
    from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor

    # Batches that ran: transformers' own step counter (EngineStats.steps_total) also counts its idle polls,
    # which a loaded host multiplies (540 once in a CI run beside other jobs).
    batches = []
    prepare = ContinuousBatchProcessor.prepare_next_batch

    def counted(processor: ContinuousBatchProcessor) -> bool:
        ready = prepare(processor)
        batches.extend([1] if ready else [])
        return ready

    monkeypatch.setattr(ContinuousBatchProcessor, "prepare_next_batch", counted)
    runtime, engine = start_engine(bundle, device, monkeypatch, CONFIG_16)
    rng = random.Random(16)
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randrange(2, 40))] for _ in range(16)]
    eos = next(iter(runtime.info.eos_token_ids))
    try:
        outputs = asyncio.run(run_requests(engine, prompts, SamplingParams(temperature=0, max_tokens=12)))
    finally:
        engine.shutdown()
    check_greedy(outputs, prompts, generate_greedy(tiny_llama_dir, prompts, 12, eos, device), eos, 12)
    # One at a time would take 16 x (1 prefill + 11 decodes) = 192 batches; batched they share them.
    assert 0 < len(batches) < 100, len(batches)


def test_paged_cache_is_sized_by_our_kv_budget(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, engine = start_engine(bundle, "cpu", monkeypatch)
    try:
        asyncio.run(run_requests(engine, [[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2)))
        cache = engine._manager.manager.batch_processor.cache
        assert cache.num_blocks == CONFIG.kv_capacity_tokens // paged_compat.PAGE_SIZE
        assert cache.max_batch_tokens == CONFIG.step_token_budget
    finally:
        engine.shutdown()


def cache_tensor_bytes(cache) -> int:  # noqa: ANN001 - transformers' PagedAttentionCache
    return sum(t.numel() * t.element_size() for t in [*cache.key_cache, *cache.value_cache])


@pytest.mark.cuda
def test_cuda_kv_memory_is_what_our_budget_asked_for(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paged cache's blocks come from our token budget (plus transformers' two spare blocks), never from a
    share of the GPU's free memory, and ``torch.cuda.memory_allocated`` grows by those KV tensors plus step
    buffers that stay inside the runtime overhead the sizing reserves for torch (H100: ~100 MiB of 1.25 GiB)."""
    import torch

    config = EngineConfig(kv_capacity_tokens=64 * 1024, max_running=16, context_length=256, step_token_budget=256)
    runtime = load_runtime(bundle, "cuda", monkeypatch, config)
    model_config = runtime.model.config
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    element = next(runtime.model.parameters()).element_size()
    per_token = 2 * model_config.num_hidden_layers * model_config.num_key_value_heads * head_dim * element
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    engine = engine_for(runtime, config)
    engine.start()
    try:
        asyncio.run(run_requests(engine, [[5, 6, 7]], SamplingParams(temperature=0, max_tokens=2)))
        torch.cuda.synchronize()
        grown = torch.cuda.memory_allocated() - before
        cache = engine._manager.manager.batch_processor.cache
        kv_bytes = cache_tensor_bytes(cache)
    finally:
        engine.shutdown()
    page = paged_compat.PAGE_SIZE
    assert cache.num_blocks == config.kv_capacity_tokens // page
    budget_bytes = config.kv_capacity_tokens * per_token
    assert budget_bytes <= kv_bytes <= budget_bytes + 2 * page * per_token, (kv_bytes, budget_bytes)
    assert kv_bytes <= grown <= kv_bytes + backend("torch").memory.runtime_overhead_bytes, (grown, kv_bytes)


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


@pytest.mark.parametrize("device", DEVICES)
def test_per_request_sampling_beside_greedy_or_a_clear_refusal(bundle: Path, tiny_llama_dir: Path, device: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers 5.x samples per request: hot requests vary while a greedy one in the same batch still
    equals ``generate``. Older releases sample with one global setting: the hot request is a RequestError
    naming temperature (a 400), before anything is queued."""
    runtime, engine = start_engine(bundle, device, monkeypatch)
    prompt = [5, 17, 99, 42]
    eos = next(iter(runtime.info.eos_token_ids))
    greedy = SamplingParams(temperature=0, max_tokens=10)
    hot = SamplingParams(temperature=1.5, top_p=0.95, max_tokens=10, ignore_eos=True)
    try:
        if not paged_compat.has_per_request_sampling():
            async def ask_hot() -> None:
                engine.add_request("hot", prompt, hot)

            with pytest.raises(RequestError, match="temperature=1.5") as info:
                asyncio.run(ask_hot())
            assert info.value.param == "temperature" and engine.active_requests() == []
            return
        outputs = asyncio.run(run_requests(engine, [prompt] * 4, [greedy, hot, hot, hot]))
    finally:
        engine.shutdown()
    check_greedy(outputs[:1], [prompt], generate_greedy(tiny_llama_dir, [prompt], 10, eos, device), eos, 10)
    sampled = [tuple(o.token_ids) for o in outputs[1:]]
    assert all(len(s) == 10 for s in sampled)
    assert len(set(sampled)) > 1, sampled  # 3 draws of 10 tokens at T=1.5 from a random model agree by chance ~never


@pytest.mark.parametrize("device", DEVICES)
def test_a_failed_paged_step_ends_its_requests_with_error_and_health_sees_it(
        bundle: Path, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a failed forward pass is an "error" (a 500 / SSE error for the client), never an "abort"
    (a client disconnect). transformers' manager stops after a failed forward, so the engine then says it
    is not running, which /health turns into a 503."""
    runtime, engine = start_engine(bundle, device, monkeypatch)

    def broken_forward(*args, **kwargs):  # noqa: ANN002, ANN003 - stands in for any model.forward
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    try:
        assert engine.is_running
        monkeypatch.setattr(runtime.model, "forward", broken_forward)
        outputs = asyncio.run(run_requests(engine, [[5, 6, 7], [8, 9]], SamplingParams(temperature=0, max_tokens=4)))
        for out in outputs:
            assert out.finish_reason == "error" and "illegal memory access" in (out.error or "")
        engine._manager.manager._generation_thread.join(timeout=30)
        assert not engine.is_running
    finally:
        engine.shutdown()
