"""Prefix cache on llama.cpp (tiny real GGUF): cells are shared through llama_memory_seq_cp, not copied,
and reusing them gives the logits and greedy tokens of computing them (within the kernel tolerance of
tests/runtimes/test_llama_cpp.py: llama.cpp may pick other matmul kernels for other batch shapes)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest

from edgeopt.engine import Engine, SamplingParams, engine_config_for
from edgeopt.engine.prefix_tree import common_prefix_length
from edgeopt.errors import BackendError
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load_gguf
from tests.engine.helpers import generate_all, run_engine
from tests.runtimes.test_llama_cpp import LOGIT_TOLERANCE, THREADS, assert_same_greedy, greedy_alone

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def gguf_path(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def open_runtime(path: Path, kv: int = 2048, slots: int = 4, cache_slots: int = 8, batch: int = 128) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=kv, max_slots=slots, max_batch_tokens=batch, threads=THREADS,
                     n_gpu_layers=0, cache_slots=cache_slots)


def prompt_ids(runtime: LlamaCppRuntime, text: str) -> list[int]:
    return runtime.tokenizer.encode(text)


def check_shared_prefix_logits(runtime: LlamaCppRuntime) -> tuple[int, list[int]]:
    """Cache a computed prompt under the first cache id, hand all but its last token to sequence 1 and
    feed that token: the logits are those of computing the whole prompt. Returns (cache id, prompt)."""
    prompt = prompt_ids(runtime, "def add(a, b):\n    return a + b\n" * 3)
    full = runtime.step([StepInput(0, prompt, 0, True)])[0]
    cache_id = runtime.info.max_slots
    runtime.share_kv(0, cache_id, 0, len(prompt))
    runtime.release(0)
    assert runtime.held_tokens(cache_id) == len(prompt) and runtime.kv_cells_used() == 0
    runtime.share_kv(cache_id, 1, 0, len(prompt) - 1)
    assert runtime.held_tokens(1) == len(prompt) - 1
    reused = runtime.step([StepInput(1, prompt[-1:], len(prompt) - 1, True)])[0]
    assert float(np.max(np.abs(reused - full))) <= LOGIT_TOLERANCE
    assert int(np.argmax(reused)) == int(np.argmax(full))
    return cache_id, prompt


def test_shared_prefix_gives_the_logits_of_computing_it(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path)
    try:
        check_shared_prefix_logits(runtime)
    finally:
        runtime.close()


def test_sharing_does_not_copy_cells(gguf_path: Path) -> None:
    """256 cells: a 200-token prefix shared with three sequences fits only if its cells are not copied."""
    runtime = open_runtime(gguf_path, kv=256, slots=3, cache_slots=2)
    try:
        assert runtime.info.kv_capacity_tokens == 256
        prompt = (prompt_ids(runtime, "x = 1\n" * 200))[:200]
        for start in range(0, 200, 100):
            runtime.step([StepInput(0, prompt[start:start + 100], start, start + 100 == 200)])
        runtime.share_kv(0, 3, 0, 200)
        runtime.release(0)
        for slot in range(3):
            runtime.share_kv(3, slot, 0, 199)
        batch = [StepInput(slot, [prompt[-1], 10 + slot], 199, True) for slot in range(3)]
        assert runtime.step(batch).shape == (3, runtime.info.vocab_size)  # 200 + 3 x 2 cells <= 256
        runtime.trim(3, 50)
        assert runtime.held_tokens(3) == 50 and runtime.held_tokens(0) == 201
    finally:
        runtime.close()


def test_bad_prefix_operations_are_refused(gguf_path: Path) -> None:
    runtime = open_runtime(gguf_path, cache_slots=1)
    try:
        with pytest.raises(BackendError, match="sequence id 5 is outside 0..4"):
            runtime.share_kv(0, 5, 0, 1)
        with pytest.raises(BackendError, match="the source holds 0"):
            runtime.share_kv(0, 4, 0, 1)
        runtime.step([StepInput(0, [1, 2, 3], 0, False)])
        with pytest.raises(BackendError, match="trim"):
            runtime.trim(0, 4)
    finally:
        runtime.close()


def run_conversations(runtime: LlamaCppRuntime, prefix_cache: bool, turns: int = 3):
    """Three conversations over one system prompt, turn by turn: (prompt, answer) of every turn, stats."""
    engine = Engine(runtime, engine_config_for(runtime, prefix_cache=prefix_cache))
    system = "You are a helpful assistant who answers in Python.\n" * 4

    async def body(e: Engine) -> list[tuple[list[int], list[int]]]:
        histories = [prompt_ids(runtime, system + f"User {i}: write code\n") for i in range(3)]
        turns_done = []
        for turn in range(turns):
            prompts = {f"c{i}t{turn}": h for i, h in enumerate(histories)}
            results = await generate_all(e, prompts, GREEDY)
            for i, rid in enumerate(prompts):
                turns_done.append((prompts[rid], results[rid].token_ids))
                histories[i] = histories[i] + results[rid].token_ids + prompt_ids(runtime, f"User: more {turn}\n")[1:]
        return turns_done

    return run_engine(engine, body), engine.stats()


def shared_system(turns: list[tuple[list[int], list[int]]]) -> int:
    """Tokens the three first turns of run_conversations have in common (the system prompt and "User ")."""
    first = [prompt for prompt, _ in turns[:3]]
    return min(common_prefix_length(first[0], other) for other in first[1:])


def test_multi_turn_greedy_outputs_match_without_the_cache(gguf_path: Path) -> None:
    uncached_rt, cached_rt = open_runtime(gguf_path), open_runtime(gguf_path)
    reference = open_runtime(gguf_path, slots=1, cache_slots=0, batch=1024)
    try:
        plain_turns, plain = run_conversations(uncached_rt, prefix_cache=False)
        cached_turns, stats = run_conversations(cached_rt, prefix_cache=True)
        assert plain.prefix_cache_queries_total == 0 and plain.kv_cached_tokens == 0
        # First turns start together: the first computes the system prompt, the other two wait for it and
        # borrow it. Every later turn borrows its whole conversation: turn t's prompt and answer, all but
        # the answer's last token (never fed).
        assert stats.prefix_cache_hits_total == 2 + 6
        assert stats.prefix_cache_hit_tokens_total == (2 * shared_system(cached_turns)
                                                       + sum(len(p) + len(a) - 1 for p, a in cached_turns[:6]))
        for prompt, answer in cached_turns + plain_turns:
            want, rows = greedy_alone(reference, prompt, len(answer))
            assert_same_greedy(want, answer, rows)
        assert stats.kv_used_tokens == 0 and cached_rt.kv_cells_used() == 0 and stats.kv_cached_tokens > 0
    finally:
        for runtime in (uncached_rt, cached_rt, reference):
            runtime.close()


def test_eviction_preemption_and_aborts_keep_outputs_and_books(gguf_path: Path) -> None:
    """A KV of 288 cells under 12 requests over shared prefixes, some aborted: every finished answer is
    the lone greedy answer, and afterwards the cache holds exactly the cells it is charged for."""
    runtime = open_runtime(gguf_path, kv=288, slots=3, cache_slots=4)
    reference = open_runtime(gguf_path, kv=512, slots=1, cache_slots=0, batch=512)
    rng = random.Random(5)
    stems = [prompt_ids(runtime, f"# module {k}\n" + "import os\n" * 12) for k in range(3)]
    prompts = [rng.choice(stems) + prompt_ids(runtime, f"def f{i}():\n")[1:] for i in range(12)]
    try:
        engine = Engine(runtime, engine_config_for(runtime, prefix_cache=True))

        async def client(e: Engine, i: int) -> tuple[list[int], str]:
            # The first six arrive together: three run side by side from the start and outgrow the 288 cells
            # even on one shared stem (~35 + 3 x (5 + 80) tokens), so preemption does not hang on timing.
            await asyncio.sleep(0 if i < 6 else rng.random() * 0.2)
            stream = e.add_request(f"r{i}", prompts[i], SamplingParams(max_tokens=80, temperature=0.0,
                                                                       ignore_eos=True))
            tokens, reason = [], ""
            async for out in stream:
                tokens += out.token_ids
                reason = out.finish_reason or reason
                if i % 4 == 3 and len(tokens) >= 3 and not out.finished:
                    e.abort(f"r{i}")
            return tokens, reason

        async def body(e: Engine):
            return await asyncio.gather(*(client(e, i) for i in range(12)))

        results = run_engine(engine, body)
        for prompt, (tokens, reason) in zip(prompts, results):
            want, rows = greedy_alone(reference, prompt, len(tokens))
            assert_same_greedy(want, tokens, rows)
        stats = engine.stats()
        assert stats.prefix_cache_hits_total > 0 and stats.preemptions_total > 0
        assert stats.prefix_cache_evicted_tokens_total > 0
        assert stats.kv_used_tokens == 0 and runtime.kv_cells_used() == 0
        assert stats.kv_cached_tokens <= 288
        assert engine.clear_prefix_cache() > 0
        cache_ids = range(runtime.info.max_slots, runtime.info.max_slots + runtime.info.cache_slots)
        assert all(runtime.held_tokens(i) == 0 for i in cache_ids)
    finally:
        runtime.close()
        reference.close()
