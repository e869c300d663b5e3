"""KV layout ``streams`` on llama.cpp (tiny real GGUF): a stream of cells per sequence id (llama-server's
layout). Greedy outputs match the unified layout's, with and without the prefix cache (which then copies
whole streams and trims them: llama.cpp aborts on a partial cross-stream copy; or copies a short sequence
through the state API), and sizing stays within the cells it is given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.demo.smollm2 import smollm2_gguf_path
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import STREAM_ALIGN, LlamaCppRuntime, load_gguf, state_copy, stream_layout
from tests.runtimes.test_llama_cpp import LOGIT_TOLERANCE, THREADS, assert_same_greedy, greedy_alone
from tests.runtimes.test_llama_cpp_prefix import (check_shared_prefix_logits, prompt_ids, run_conversations,
                                                  shared_system)


@pytest.fixture(scope="module")
def gguf_path(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def open_streams(path: Path, kv: int = 4096, slots: int = 4, cache_slots: int = 8,
                 context: int = 512) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=kv, max_slots=slots, max_batch_tokens=128, threads=THREADS,
                     n_gpu_layers=0, cache_slots=cache_slots, context_length=context, kv_layout="streams")


def test_stream_layout_fits_the_cells_it_is_given() -> None:
    assert stream_layout(10_000, 4, 8, 500) == (layout := stream_layout(10_000, 4, 8, 500))
    assert (layout.stream_cells, layout.cache_slots, layout.total_cells) == (512, 8, 512 * 12)
    short = stream_layout(4 * 512 + 3 * 512 + 100, 4, 8, 512)  # room for 3 cache streams, not 4
    assert short.cache_slots == 3 and short.total_cells <= 4 * 512 + 3 * 512 + 100
    squeezed = stream_layout(1000, 2, 8, 4096)  # not even the slots fit: shorter streams, no cache
    assert (squeezed.stream_cells, squeezed.cache_slots) == (256, 0)
    with pytest.raises(ConfigError, match="cannot give 4 sequences a stream of 256"):
        stream_layout(1000, 4, 8, 512)


def test_streams_runtime_reports_its_layout(gguf_path: Path) -> None:
    runtime = open_streams(gguf_path, kv=4 * 512 + 2 * 512 + 10, context=500)
    try:
        info = runtime.info
        assert not info.shares_kv_cells and info.cache_slots == 2
        assert info.kv_capacity_tokens == 6 * 512 and info.context_length == 500
    finally:
        runtime.close()


@pytest.fixture
def whole_stream_copies_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_copy, "STATE_COPY_MAX_BYTES", 0)  # no state fits: every copy is llama.cpp's


@pytest.mark.usefixtures("whole_stream_copies_only")
def test_share_kv_copies_whole_streams_and_trims(gguf_path: Path) -> None:
    """A partial cross-stream seq_cp would abort the process; the copy-then-trim gives the computed logits."""
    runtime = open_streams(gguf_path)
    try:
        cache_id, prompt = check_shared_prefix_logits(runtime)  # a partial range: copied whole, then trimmed
        runtime.trim(cache_id, 5)
        assert runtime.held_tokens(cache_id) == 5 and runtime.held_tokens(1) == len(prompt)
        assert runtime.streams_copied_by_state == 0
    finally:
        runtime.close()


def test_a_short_sequence_is_copied_through_the_state_api(gguf_path: Path) -> None:
    """Both shares (into the cache entry, out of it) copy the held cells at once, and give the computed logits."""
    runtime = open_streams(gguf_path)
    try:
        check_shared_prefix_logits(runtime)
        assert runtime.streams_copied_by_state == 2
    finally:
        runtime.close()


def test_the_real_models_shared_prefix_copied_through_the_state_api_gives_its_logits() -> None:
    """SmolLM2-135M-Instruct (real weights, its 49k vocabulary): the state copies reproduce the computed logits."""
    runtime = open_streams(smollm2_gguf_path())
    try:
        check_shared_prefix_logits(runtime)
        assert runtime.streams_copied_by_state == 2
    finally:
        runtime.close()


def test_a_long_sequence_or_one_behind_a_pending_copy_is_copied_whole(gguf_path: Path) -> None:
    """Past half a stream llama.cpp's copy is the cheaper one; and while a whole-stream copy is pending
    (its data moves at the next decode) a state copy, made at once, could be overwritten or read stale."""
    runtime = open_streams(gguf_path, context=512)
    try:
        long_prompt = prompt_ids(runtime, "x = [1, 2, 3]\n" * 60)[:300]  # > 256 = half a 512-cell stream
        for start in range(0, len(long_prompt), 100):
            last = runtime.step([StepInput(0, long_prompt[start:start + 100], start, True)])[0]
        short_prompt = prompt_ids(runtime, "def f():\n    pass\n")
        runtime.step([StepInput(2, short_prompt, 0, True)])
        cache_id = runtime.info.max_slots
        runtime.share_kv(0, cache_id, 0, len(long_prompt))
        runtime.share_kv(2, cache_id + 1, 0, len(short_prompt))
        assert runtime.streams_copied_by_state == 0
        runtime.release(0)
        runtime.share_kv(cache_id, 1, 0, len(long_prompt) - 1)
        reused = runtime.step([StepInput(1, long_prompt[-1:], len(long_prompt) - 1, True)])[0]
        assert float(np.max(np.abs(reused - last))) <= LOGIT_TOLERANCE
        assert runtime.held_tokens(cache_id + 1) == len(short_prompt)
    finally:
        runtime.close()


@pytest.mark.parametrize("prefix_cache, state_copies", [(False, True), (True, True), (True, False)])
def test_streams_greedy_outputs_match_unified(gguf_path: Path, prefix_cache: bool, state_copies: bool,
                                             request: pytest.FixtureRequest) -> None:
    if not state_copies:
        request.getfixturevalue("whole_stream_copies_only")
    unified = load_gguf(gguf_path, kv_capacity_tokens=2048, max_slots=4, max_batch_tokens=128, threads=THREADS,
                        n_gpu_layers=0, cache_slots=8, context_length=512)
    streams = open_streams(gguf_path)
    reference = load_gguf(gguf_path, kv_capacity_tokens=2048, max_slots=1, max_batch_tokens=1024, threads=THREADS,
                          n_gpu_layers=0, cache_slots=0)
    try:
        unified_turns, _ = run_conversations(unified, prefix_cache=prefix_cache)
        streams_turns, stats = run_conversations(streams, prefix_cache=prefix_cache)
        if prefix_cache:  # two first turns borrow the system prompt, copied from a cache stream while the
            # first one runs; every later turn borrows its conversation
            assert stats.prefix_cache_hits_total == 2 + 6
            assert stats.prefix_cache_hit_tokens_total == (2 * shared_system(streams_turns)
                                                           + sum(len(p) + len(a) - 1 for p, a in streams_turns[:6]))
        else:
            assert stats.prefix_cache_queries_total == 0
        assert (streams.streams_copied_by_state > 0) == (prefix_cache and state_copies)
        # Equal prompts give equal answers except at a near-tie (llama.cpp's kernels differ with the batch
        # shape and the cells scanned); a later turn's prompt holds earlier answers, so check every answer
        # of both layouts against the lone greedy answer instead of against each other.
        for prompt, answer in streams_turns + unified_turns:
            want, rows = greedy_alone(reference, prompt, len(answer))
            assert_same_greedy(want, answer, rows)
        assert stats.kv_used_tokens == 0 and streams.kv_cells_used() == 0
    finally:
        for runtime in (unified, streams, reference):
            runtime.close()


def test_unknown_layout_is_refused(gguf_path: Path) -> None:
    with pytest.raises(ConfigError, match="'paged' is not a llama.cpp KV layout"):
        load_gguf(gguf_path, kv_capacity_tokens=512, max_slots=1, kv_layout="paged")
    assert STREAM_ALIGN == 256


def test_a_cache_entry_saved_right_after_its_copy_holds_the_copied_kv(gguf_path: Path, tmp_path: Path) -> None:
    """llama.cpp moves a cross-stream copy's data at the next decode; saving before that (serve --warm
    saves the entry it just cached) must still write the copied KV, not the stale stream."""
    runtime = open_streams(gguf_path)
    try:
        prompt = prompt_ids(runtime, "class Stack:\n    def push(self, x):\n        self.items.append(x)\n")
        full = runtime.step([StepInput(0, prompt, 0, True)])[0]
        cache_id = runtime.info.max_slots
        runtime.share_kv(0, cache_id, 0, len(prompt))
        runtime.release(0)
        runtime.save_sequence(cache_id, tmp_path / "state", prompt)
        assert runtime.held_tokens(cache_id) == len(prompt)
        runtime.release(cache_id)
        runtime.release(0)
        runtime.step([StepInput(0, prompt_ids(runtime, "unrelated text " * 8), 0, False)])  # moves pending copies
        assert runtime.load_sequence(cache_id, tmp_path / "state", len(prompt)) == prompt
        runtime.share_kv(cache_id, 1, 0, len(prompt) - 1)
        reused = runtime.step([StepInput(1, prompt[-1:], len(prompt) - 1, True)])[0]
        assert float(np.max(np.abs(reused - full))) <= LOGIT_TOLERANCE
    finally:
        runtime.close()
