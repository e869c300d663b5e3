"""The llama.cpp runtime on a real (tiny) GGUF: batching parity, abort, preemption, sizing, tokenizer.

llama.cpp may pick other matmul kernels for other batch shapes, so logits are compared within
LOGIT_TOLERANCE, and where greedy outputs diverge the divergence must be a near-tie (the alone run's
top-2 logits within the same tolerance) rather than a real difference.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.errors import BackendError, ConfigError
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load, load_gguf
from tests.engine.helpers import generate_all, run_engine

LOGIT_TOLERANCE = 2e-2
THREADS = 1  # correctness tests; one thread is also immune to barrier stalls on a busy machine
TEXTS = [f"def function_{i}(value):\n    return value * {i} + {'1' * (i % 5 + 1)}" for i in range(16)]


@pytest.fixture(scope="module")
def gguf_path(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def open_runtime(path: Path, kv: int = 4096, slots: int = 16) -> LlamaCppRuntime:
    # 512: the batched-prefill test sends all 16 prompts (378 tokens) in one llama_decode.
    return load_gguf(path, kv_capacity_tokens=kv, max_slots=slots, max_batch_tokens=512, threads=THREADS,
                     n_gpu_layers=0)


def greedy_alone(runtime: LlamaCppRuntime, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decode one sequence by hand on slot 0; returns tokens and the logits behind each."""
    logits = runtime.step([StepInput(0, prompt, 0, True)])[0]
    tokens, rows = [], []
    for i in range(n):
        rows.append(logits)
        tokens.append(int(np.argmax(logits)))
        logits = runtime.step([StepInput(0, [tokens[-1]], len(prompt) + i, True)])[0]
    runtime.release(0)
    return tokens, rows


def assert_same_greedy(expected: list[int], got: list[int], expected_rows: list[np.ndarray],
                       tolerance: float = LOGIT_TOLERANCE) -> None:
    """The same greedy text, or a divergence at a near-tie: the two tokens within ``tolerance`` in the expected
    run's logits (then what follows may differ)."""
    if got == expected:
        return
    k = next(i for i, (a, b) in enumerate(zip(expected, got)) if a != b)
    row = expected_rows[k]
    gap = float(row[expected[k]] - row[got[k]])
    assert gap <= tolerance, f"greedy diverged at token {k} with a logit gap of {gap:.4f} (not a near-tie)"


def test_batched_logits_match_a_lone_sequence(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path)
    try:
        prompts = [runtime.tokenizer.encode(t) for t in TEXTS]
        alone = runtime.step([StepInput(0, prompts[5], 0, True)])[0]
        runtime.release(0)
        batch = [StepInput(slot, p, 0, True) for slot, p in enumerate(prompts)]
        together = runtime.step(batch)
        assert together.shape == (16, runtime.info.vocab_size) and runtime.decode_calls == 2
        np.testing.assert_allclose(together[5], alone, atol=LOGIT_TOLERANCE)
        # A decode step of 16 sequences, one token each, in ONE llama_decode.
        nxt = [StepInput(slot, [int(np.argmax(together[slot]))], len(p), True) for slot, p in enumerate(prompts)]
        assert runtime.step(nxt).shape == (16, runtime.info.vocab_size) and runtime.decode_calls == 3
        for slot in range(16):
            runtime.release(slot)
        assert runtime.kv_cells_used() == 0
    finally:
        runtime.close()


def test_engine_greedy_alone_equals_batched_with_15_others(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path)
    prompts = {f"r{i}": runtime.tokenizer.encode(t) for i, t in enumerate(TEXTS)}
    expected = {rid: greedy_alone(runtime, ids, 20) for rid, ids in prompts.items()}
    engine = Engine(runtime, engine_config_for(runtime))
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    calls_before = runtime.decode_calls
    results = run_engine(engine, lambda e: generate_all(e, prompts, params), autostart=False)
    # One prefill step for all sixteen prompts, then one shared decode per token: 20 llama_decode calls.
    assert runtime.decode_calls - calls_before == 20
    for rid, (tokens, rows) in expected.items():
        assert len(results[rid].token_ids) == 20
        assert_same_greedy(tokens, results[rid].token_ids, rows)
    assert engine.stats().kv_used_tokens == 0 and runtime.kv_cells_used() == 0
    runtime.close()


def test_preemption_under_a_tiny_kv_cache_recomputes_correctly(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path, kv=256, slots=8)
    prompts = {f"r{i}": runtime.tokenizer.encode(t) for i, t in enumerate(TEXTS[:6])}
    expected = {rid: greedy_alone(runtime, ids, 60) for rid, ids in prompts.items()}
    engine = Engine(runtime, engine_config_for(runtime, kv_capacity_tokens=256, step_token_budget=128,
                                               prefill_chunk=64))
    params = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
    results = run_engine(engine, lambda e: generate_all(e, prompts, params), autostart=False)
    assert engine.stats().preemptions_total > 0
    for rid, (tokens, rows) in expected.items():
        assert_same_greedy(tokens, results[rid].token_ids, rows)
    assert engine.stats().kv_used_tokens == 0 and runtime.kv_cells_used() == 0
    runtime.close()


def test_abort_frees_the_sequence_in_llama_cpp(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path, kv=1024, slots=4)
    engine = Engine(runtime, engine_config_for(runtime))

    async def body(e: Engine) -> None:
        stream = e.add_request("a", runtime.tokenizer.encode(TEXTS[0]), SamplingParams(max_tokens=400,
                                                                                      ignore_eos=True))
        await stream.__anext__()
        e.abort("a")
        assert [o async for o in stream][-1].finish_reason == "abort"
        await asyncio.sleep(0.05)
        assert e.stats().kv_used_tokens == 0 and runtime.kv_cells_used() == 0

    run_engine(engine, body)
    runtime.close()


def test_the_runtime_receives_its_sizes_and_never_computes_them(gguf_path: Path) -> None:
    manifest = SimpleNamespace(model_file=gguf_path.name)
    with pytest.raises(ConfigError, match="needs kv_capacity_tokens and max_slots") as info:
        load(gguf_path.parent, manifest, threads=THREADS, context_length=256)
    assert "decide_serving_shape" in info.value.hint
    runtime = load(gguf_path.parent, manifest, kv_capacity_tokens=300, max_slots=2, threads=THREADS,
                   context_length=256)
    try:  # llama.cpp rounds n_ctx up to 512; the engine is told the 300 cells it was sized for
        assert runtime.info.kv_capacity_tokens == engine_config_for(runtime).kv_capacity_tokens == 300
        assert runtime.info.max_slots == 2 and runtime.info.context_length == 256 and runtime.info.eos_token_ids
    finally:
        runtime.close()


def test_oversized_step_and_closed_runtime_raise_backend_errors(gguf_path: Path) -> None:
    runtime = load_gguf(gguf_path, kv_capacity_tokens=512, max_slots=2, max_batch_tokens=32, threads=THREADS,
                        n_gpu_layers=0)
    with pytest.raises(BackendError, match="a step of 40 tokens does not fit llama.cpp's batch of 32"):
        runtime.step([StepInput(0, [1] * 40, 0, True)])
    runtime.close()
    with pytest.raises(BackendError, match="closed"):
        runtime.step([StepInput(0, [1], 0, True)])


def test_tokenizer_matches_the_hf_tokenizer_and_streams_bytes(gguf_path: Path, tiny_model_factory) -> None:
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tiny_model_factory("llama-gqa") / "tokenizer.json"))
    runtime = open_runtime(gguf_path, kv=256, slots=1)
    try:
        tok = runtime.tokenizer
        for text in ["hello world", "def f(x):\n    return x  # café ✓", TEXTS[3]]:
            ids = tok.encode(text, add_special=False)
            assert ids == hf.encode(text, add_special_tokens=False).ids, text
            assert b"".join(tok.token_bytes(i) for i in ids).decode() == text
        im_end = tok.encode("<|im_end|>", add_special=False)
        assert len(im_end) == 1 and tok.token_bytes(im_end[0]) == b"" and im_end[0] in runtime.info.eos_token_ids
    finally:
        runtime.close()


@pytest.mark.cuda
def test_cuda_profile_offloads_every_layer_and_matches_cpu_logits(gguf_path: Path) -> None:
    import llama_cpp

    from edgeopt.profiles import load_profile

    assert llama_cpp.llama_supports_gpu_offload(), "this llama-cpp-python build has no GPU backend"
    prompt_text = TEXTS[2]
    cpu = open_runtime(gguf_path, kv=256, slots=1)
    gpu = load_gguf(gguf_path, kv_capacity_tokens=256, max_slots=1, threads=THREADS,
                    profile=load_profile("jetson-agx-orin-64gb"))  # a CUDA profile: n_gpu_layers=-1
    try:
        prompt = cpu.tokenizer.encode(prompt_text)
        expected = cpu.step([StepInput(0, prompt, 0, True)])[0]
        got = gpu.step([StepInput(0, prompt, 0, True)])[0]
        np.testing.assert_allclose(got, expected, atol=5 * LOGIT_TOLERANCE)
    finally:
        cpu.close()
        gpu.close()


def test_the_raw_benchmark_decodes_through_the_public_decode_only(gguf_path: Path) -> None:
    """runtimes/llama_cpp/bench.py measures llama.cpp's ceiling through ``decode_only``, not the runtime's
    private context and batch: the same cells fill as with ``step``, and the figure counts every token."""
    from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode

    runtime = open_runtime(gguf_path, kv=256, slots=2)
    try:
        runtime.step([StepInput(0, [5, 6, 7], 0, True), StepInput(1, [8, 9], 0, True)])
        runtime.decode_only([StepInput(0, [10], 3, True), StepInput(1, [11], 2, True)])
        assert runtime.kv_cells_used() == 4 + 3
        with pytest.raises(BackendError, match="does not fit"):
            runtime.decode_only([StepInput(0, [1] * 600, 4, True)])
    finally:
        runtime.close()
    result = raw_batched_decode(gguf_path, n_sequences=2, decode_steps=3, prompt_tokens=4, threads=1, warmup_steps=1)
    assert result.tokens == 6 and result.seconds > 0
