"""Prefix cache on the ONNX runtime (tiny exported Llama): reused KV arrays give the logits of computing
them, and a multi-turn run with the cache answers what a run without it answers, after eviction too."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.engine import Engine, EngineConfig, SamplingParams
from edgeopt.errors import BackendError
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput
from tests.engine.helpers import generate_all, run_engine

GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)


def open_runtime(bundle, kv: int = 2048, cache_slots: int = 4):
    return load_runtime("onnxruntime", bundle, load_bundle(bundle), kv_capacity_tokens=kv, max_slots=3,
                        context_length=256, threads=1, cache_slots=cache_slots)


def test_shared_prefix_gives_the_logits_of_computing_it(onnx_fp32_bundle) -> None:
    runtime = open_runtime(onnx_fp32_bundle)
    try:
        prompt = runtime.tokenizer.encode("def add(a, b):\n    return a + b\n" * 2)
        full = runtime.step([StepInput(0, prompt, 0, True)])[0]
        runtime.share_kv(0, 3, 0, len(prompt))
        runtime.release(0)
        runtime.share_kv(3, 1, 0, len(prompt) - 1)
        reused = runtime.step([StepInput(1, prompt[-1:], len(prompt) - 1, True)])[0]
        np.testing.assert_allclose(reused, full, atol=1e-4)
        runtime.trim(3, 5)
        assert runtime.cached_tokens(3) == 5 and runtime.cached_tokens(1) == len(prompt)
        with pytest.raises(BackendError, match="and the target 36"):
            runtime.share_kv(3, 1, 0, 2)
        with pytest.raises(BackendError, match="outside 0..6"):
            runtime.release(7)
    finally:
        runtime.close()


def conversation(runtime, prefix_cache: bool, kv: int) -> tuple[list[list[int]], object]:
    config = EngineConfig(kv_capacity_tokens=kv, max_running=3, context_length=256, prefix_cache=prefix_cache,
                          step_token_budget=64, prefill_chunk=32)
    engine = Engine(runtime, config)
    system = runtime.tokenizer.encode("You answer in code.\n" * 6)  # over 32 tokens: first turns share it

    async def body(e: Engine) -> list[list[int]]:
        histories = [system + runtime.tokenizer.encode(f"task {i}\n", add_special=False) for i in range(3)]
        answers = []
        for turn in range(3):
            results = await generate_all(e, {f"c{i}t{turn}": h for i, h in enumerate(histories)}, GREEDY)
            for i in range(3):
                answer = results[f"c{i}t{turn}"].token_ids
                answers.append(answer)
                histories[i] = histories[i] + answer + runtime.tokenizer.encode("more\n", add_special=False)
        return answers

    return run_engine(engine, body), engine.stats()


@pytest.mark.parametrize("kv", [2048, 300], ids=["roomy", "evicting"])
def test_multi_turn_outputs_match_without_the_cache(onnx_fp32_bundle, kv: int) -> None:
    plain_rt, cached_rt = open_runtime(onnx_fp32_bundle, kv), open_runtime(onnx_fp32_bundle, kv)
    try:
        expected, plain = conversation(plain_rt, False, kv)
        got, stats = conversation(cached_rt, True, kv)
        assert got == expected
        assert plain.prefix_cache_queries_total == 0 and stats.prefix_cache_hits_total >= 6
        if kv == 2048:  # two first turns borrow the system prompt the first one computed; every later turn
            assert stats.prefix_cache_hits_total == 2 + 6  # borrows its conversation
        assert stats.kv_used_tokens == 0 and stats.kv_cached_tokens <= kv
        assert (stats.prefix_cache_evicted_tokens_total > 0) == (kv == 300)
        cache_ids = range(3, 3 + cached_rt.info.cache_slots)
        assert sum(cached_rt.cached_tokens(i) for i in cache_ids) == stats.kv_cached_tokens
    finally:
        plain_rt.close()
        cached_rt.close()
