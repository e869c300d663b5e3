"""The CUDA paged-attention engine. Sizing and request checks run anywhere; generation needs a GPU
(``-m cuda``) and is compared with transformers' ``generate`` on the same checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgeopt.bundle import load_bundle
from edgeopt.engine.api import EngineConfig, SamplingParams
from edgeopt.errors import RequestError
from runtimes.torch.paged import GREEDY_TEMPERATURE, PAGE_SIZE, paged_config, sampling_kwargs
from tests.runtimes.test_torch_serve import transformers_greedy
from tests.runtimes.torch_bundles import make_torch_bundle


def test_paged_cache_is_sized_by_our_kv_budget_not_by_free_gpu_memory() -> None:
    config = EngineConfig(kv_capacity_tokens=10_000, max_running=8, step_token_budget=384)
    cb = paged_config(config)
    assert cb.num_blocks == 10_000 // PAGE_SIZE and cb.page_size == PAGE_SIZE
    assert cb.num_blocks * cb.page_size <= config.kv_capacity_tokens
    assert (cb.max_batch_tokens, cb.max_requests_per_batch) == (384, 8)
    assert cb.per_request_processors is True


def test_greedy_and_sampling_map_to_per_request_processor_kwargs() -> None:
    greedy = sampling_kwargs(SamplingParams(temperature=0), vocab_size=512)
    assert greedy["temperature"] == GREEDY_TEMPERATURE and greedy["top_k"] == 512
    sampled = sampling_kwargs(SamplingParams(temperature=0.7, top_k=40, top_p=0.9), vocab_size=512)
    assert sampled == {"temperature": 0.7, "top_k": 40, "top_p": 0.9}


@pytest.mark.parametrize("params, name", [
    (SamplingParams(seed=3), "seed"),
    (SamplingParams(repetition_penalty=1.2), "repetition_penalty"),
    (SamplingParams(logit_bias={5: 2.0}), "logit_bias"),
])
def test_parameters_the_paged_engine_cannot_honour_are_refused_by_name(params: SamplingParams, name: str) -> None:
    with pytest.raises(RequestError, match=name) as info:
        sampling_kwargs(params, vocab_size=512)
    assert info.value.param == name


@pytest.mark.cuda
def test_paged_engine_greedy_output_equals_generate_on_cuda(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from runtimes import load_runtime

    bundle = make_torch_bundle(tiny_llama_dir, tmp_path / "b", quant="fp32")
    runtime = load_runtime("torch", bundle, load_bundle(bundle), device="cuda", kv_capacity_tokens=2048,
                           max_slots=4, context_length=256)
    engine = runtime.create_engine(EngineConfig(kv_capacity_tokens=2048, max_running=4, context_length=256))
    engine.start()
    prompts = [[5, 17, 99, 42], [7, 8, 9], [300, 301, 302, 303, 304, 305]]
    eos = next(iter(runtime.info.eos_token_ids))

    async def run_all() -> list[list[int]]:
        streams = [engine.add_request(f"r{i}", p, SamplingParams(temperature=0, max_tokens=12))
                   for i, p in enumerate(prompts)]
        return [(await s.collect()).token_ids for s in streams]

    try:
        outputs = asyncio.run(run_all())
    finally:
        engine.shutdown()
    for prompt, got in zip(prompts, outputs):
        want = transformers_greedy(tiny_llama_dir, prompt, 12, eos)
        assert [t for t in got if t != eos] == want
