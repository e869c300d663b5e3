"""Per-sequence streams laid out for one pass (runtimes/llama_cpp/stream_order.py), and move_kv renaming.

llama.cpp decodes a step over streams in one pass only when its sequence ids are consecutive and
increasing; the runtime sorts the step, pads holes with throwaway tokens and puts the logits rows back
in the engine's order. These tests check the layout itself and that, on a real GGUF, a shuffled step
with holes gives every sequence the logits it gets decoded alone, leaving no padding behind.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import LlamaCppRuntime, load_gguf
from edgeopt.runtimes.llama_cpp.stream_order import PAD_TOKEN, hole_moves, lay_out
from tests.runtimes.test_llama_cpp import LOGIT_TOLERANCE, THREADS
from tests.runtimes.test_llama_cpp_prefix import prompt_ids


@pytest.fixture(scope="module")
def gguf_path(tiny_gguf_factory) -> Path:
    return tiny_gguf_factory("llama-gqa", "F16")


def test_layout_sorts_pads_holes_and_restores_the_row_order() -> None:
    held = {0: 10, 1: 3, 2: 0, 3: 7, 4: 512, 5: 9}  # stream 4 is full: it cannot take a padding token
    stream_of = [5, 0, 3, 1, 2, 4]  # engine id -> stream
    batch = [StepInput(0, [11], 9, True),  # stream 5
             StepInput(1, [12, 13], 10, False, all_logits=True),  # stream 0, two rows
             StepInput(2, [14], 7, True)]  # stream 3
    laid = lay_out(batch, stream_of, held.__getitem__, stream_cells=512, capacity=64)
    assert [item.slot for item in laid.inputs] == [0, 1, 2, 3, 5]
    assert laid.padding == [(1, 3), (2, 0)]
    assert all(item.tokens == [PAD_TOKEN] and not item.want_logits for item in laid.inputs if item.slot in (1, 2))
    # Decoded rows: stream 0's two, then stream 3's, then stream 5's; the engine's order is 5, 0, 0, 3.
    assert laid.row_order.tolist() == [3, 0, 1, 2]


def test_layout_of_sequences_already_in_stream_order_keeps_the_rows_as_decoded() -> None:
    batch = [StepInput(0, [11], 9, True), StepInput(1, [12], 4, True)]
    laid = lay_out(batch, [2, 3], lambda stream: 9, stream_cells=512, capacity=64)
    assert [item.slot for item in laid.inputs] == [2, 3] and laid.row_order is None


def test_layout_pads_no_further_than_the_batch_buffer() -> None:
    batch = [StepInput(0, [1], 4, True), StepInput(1, [1], 4, True)]
    laid = lay_out(batch, [0, 9], lambda stream: 4, stream_cells=256, capacity=5)
    assert [stream for stream, _ in laid.padding] == [1, 2, 3]  # 2 real tokens + 3 pads fill the buffer of 5


def open_streams(path: Path, slots: int = 6, cache_slots: int = 2) -> LlamaCppRuntime:
    return load_gguf(path, kv_capacity_tokens=(slots + cache_slots) * 256, max_slots=slots, max_batch_tokens=128,
                     threads=THREADS, n_gpu_layers=0, cache_slots=cache_slots, context_length=256,
                     kv_layout="streams")


def test_a_shuffled_step_with_holes_gives_each_sequence_its_own_logits(gguf_path: Path) -> None:
    runtime, alone = open_streams(gguf_path), open_streams(gguf_path)
    try:
        prompts = [prompt_ids(runtime, f"def f{i}(x):\n    return x * {i}\n") for i in range(6)]
        for slot, prompt in enumerate(prompts):
            runtime.step([StepInput(slot, prompt, 0, False)])
        # Slots 1 and 4 sit this step out (holes); the rest come in shuffled order.
        order = [5, 0, 3, 2]
        rows = runtime.step([StepInput(slot, [7 + slot], len(prompts[slot]), True) for slot in order])
        for row, slot in zip(rows, order):
            want = alone.step([StepInput(0, prompts[slot] + [7 + slot], 0, True)])[0]
            alone.release(0)
            assert float(np.max(np.abs(row - want))) <= LOGIT_TOLERANCE, slot
        # The holes' throwaway tokens are gone; the stepped sequences hold one more position.
        assert [runtime.held_tokens(slot) for slot in range(6)] == [
            len(p) + (slot in order) for slot, p in enumerate(prompts)]
    finally:
        runtime.close()
        alone.close()


@pytest.mark.parametrize("layout", ["unified", "streams"])
def test_move_kv_renames_a_sequence_and_it_goes_on(gguf_path: Path, layout: str) -> None:
    runtime = load_gguf(gguf_path, kv_capacity_tokens=4 * 256, max_slots=2, max_batch_tokens=128, threads=THREADS,
                        n_gpu_layers=0, cache_slots=2, context_length=256, kv_layout=layout)
    try:
        prompt = prompt_ids(runtime, "class Queue:\n    def put(self, item):\n")
        full = runtime.step([StepInput(0, prompt, 0, True)])[0]
        runtime.step([StepInput(0, prompt[:0] + [int(np.argmax(full))], len(prompt), False)])
        runtime.move_kv(0, 3)  # into a cache id, as parking does
        assert (runtime.held_tokens(0), runtime.held_tokens(3)) == (0, len(prompt) + 1)
        runtime.move_kv(3, 1)  # and back into another slot, as a continuation does
        runtime.trim(1, len(prompt) - 1)
        again = runtime.step([StepInput(1, prompt[-1:], len(prompt) - 1, True)])[0]
        assert float(np.max(np.abs(again - full))) <= LOGIT_TOLERANCE
        runtime.step([StepInput(0, prompt, 0, False)])  # the emptied name takes a new sequence
        assert runtime.held_tokens(0) == len(prompt) and runtime.held_tokens(1) == len(prompt)
    finally:
        runtime.close()


def test_hole_moves_picks_long_holes_and_empty_streams_outside_the_step() -> None:
    held = {0: 40, 1: 900, 2: 0, 3: 300, 4: 41, 5: 30, 6: 0, 7: 0, 8: 700}
    step = [StepInput(0, [1], 40, True), StepInput(4, [1], 41, True)]  # streams 0 and 4: span 256 cells
    # Stream 1 (900) and 3 (300) would lengthen the pass; stream 2 is empty. Longest first, to the highest
    # empty streams outside 0..4; 8 is held, so 7 and 6.
    names = list(range(9))  # engine id = stream here
    assert hole_moves(step, names, held.__getitem__, 9) == [(1, 7), (3, 6)]
    assert hole_moves(step, names, {**held, 6: 5, 7: 5}.__getitem__, 9) == []  # nowhere to go: left (padded)
    # A hole no longer than the step's own longest stream (rounded up to 256) costs nothing: left.
    longer = [StepInput(0, [1], 280, True), StepInput(4, [1], 41, True)]
    assert hole_moves(longer, names, held.__getitem__, 9) == [(1, 7)]
    # Engine ids are names: the same step with ids 2 and 3 living in streams 0 and 4.
    assert hole_moves([StepInput(2, [1], 40, True), StepInput(3, [1], 41, True)], [5, 6, 0, 4, 1, 2, 3, 7, 8],
                      held.__getitem__, 9) == [(1, 7), (3, 6)]


def test_a_new_sequence_lands_next_to_the_running_ones_and_a_cached_prefix_moves_up_intact(gguf_path: Path) -> None:
    """Finished requests are parked where they ran (renamed, not moved). A new sequence takes the lowest
    empty stream when that leaves no cached prefix between it and the running ones; otherwise the stream
    of a cached prefix, which moves up first. The moved prefix continues exactly as before, and every
    running sequence gets its own logits."""
    runtime, alone = open_streams(gguf_path, slots=4, cache_slots=4), open_streams(gguf_path, slots=4, cache_slots=4)
    try:
        prompts = [prompt_ids(runtime, f"def handler_{i}(event, context):\n    return {{'status': {i}}}\n")
                   for i in range(3)]
        last_rows = runtime.step([StepInput(slot, prompt, 0, True) for slot, prompt in enumerate(prompts)])
        runtime.move_kv(0, 4)  # requests 0 and 2 finish: parked on streams 0 and 2; request 1 runs on stream 1
        runtime.move_kv(2, 6)
        assert [runtime.stream_of(i) for i in (4, 1, 6)] == [0, 1, 2] and runtime.streams_moved == 0
        # The lowest empty stream (3) would leave the entry on stream 2 between 1 and 3: the new sequence
        # takes stream 0 instead, and entry 4 moves to the highest empty stream.
        short = prompt_ids(runtime, "x = 0\n")
        nxt = int(np.argmax(last_rows[1]))
        rows = runtime.step([StepInput(0, short, 0, True), StepInput(1, [nxt], len(prompts[1]), True)])
        assert (runtime.stream_of(0), runtime.stream_of(1), runtime.stream_of(4)) == (0, 1, 7)
        assert runtime.streams_moved == 1
        for row, prompt in zip(rows, [short, prompts[1] + [nxt]]):
            want = alone.step([StepInput(0, prompt, 0, True)])[0]
            alone.release(0)
            assert float(np.max(np.abs(row - want))) <= LOGIT_TOLERANCE
        runtime.release(0)
        runtime.release(1)
        for entry, i in ((4, 0), (6, 2)):  # the moved entry and the one left alone: intact, and they go on
            assert runtime.held_tokens(entry) == len(prompts[i])
            runtime.move_kv(entry, 3)
            runtime.trim(3, len(prompts[i]) - 1)
            again = runtime.step([StepInput(3, prompts[i][-1:], len(prompts[i]) - 1, True)])[0]
            assert float(np.max(np.abs(again - last_rows[i]))) <= LOGIT_TOLERANCE, entry
            runtime.release(3)
    finally:
        runtime.close()
        alone.close()


def test_a_lone_new_sequence_takes_the_lowest_empty_stream_without_copying(gguf_path: Path) -> None:
    runtime = open_streams(gguf_path, slots=4, cache_slots=4)
    try:
        prompt = prompt_ids(runtime, "def area(r):\n    return 3.14159 * r * r\n")
        runtime.step([StepInput(0, prompt, 0, True)])
        runtime.move_kv(0, 4)  # parked on stream 0
        runtime.share_kv(4, 1, 0, 6)  # a new conversation on the same prefix: nothing else runs
        assert runtime.stream_of(1) == 1 and runtime.streams_moved == 0
    finally:
        runtime.close()


def test_a_long_prefix_parked_between_running_sequences_moves_out_of_their_way(gguf_path: Path) -> None:
    runtime = load_gguf(gguf_path, kv_capacity_tokens=8 * 512, max_slots=4, max_batch_tokens=128, threads=THREADS,
                        n_gpu_layers=0, cache_slots=4, context_length=512, kv_layout="streams")
    try:
        short = [prompt_ids(runtime, "x = 1\n"), prompt_ids(runtime, "y = 2\n")]
        long = prompt_ids(runtime, "def f(a, b):\n    return a + b\n" * 40)[:300]  # > 256 cells: a longer pass
        rows = runtime.step([StepInput(0, short[0], 0, True), StepInput(1, long[:100], 0, False),
                             StepInput(2, short[1], 0, True)])
        for start in (100, 200):
            runtime.step([StepInput(1, long[start:start + 100], start, False)])
        assert [runtime.stream_of(slot) for slot in range(3)] == [0, 1, 2]
        runtime.move_kv(1, 4)  # the long one finishes: parked where it ran, between the other two
        nxt = [int(np.argmax(row)) for row in rows]
        runtime.step([StepInput(0, [nxt[0]], len(short[0]), True), StepInput(2, [nxt[1]], len(short[1]), True)])
        assert runtime.stream_of(4) == 7 and runtime.held_tokens(4) == len(long)  # moved up, whole
        assert runtime.held_tokens(0) == len(short[0]) + 1 and runtime.held_tokens(2) == len(short[1]) + 1
    finally:
        runtime.close()


def test_a_copy_into_a_cache_entry_stays_where_it_is(gguf_path: Path) -> None:
    """Only running sequences claim low streams: a running prefix copied into a cache id (the prefix cache's
    snapshot) stays on the cache id's own stream."""
    runtime = open_streams(gguf_path, slots=4, cache_slots=4)
    try:
        prompt = prompt_ids(runtime, "def area(r):\n    return 3.14159 * r * r\n")
        runtime.step([StepInput(0, prompt, 0, True)])
        before = runtime.stream_of(6)
        runtime.share_kv(0, 6, 0, len(prompt) - 2)
        assert runtime.stream_of(6) == before and runtime.held_tokens(6) == len(prompt) - 2
        assert runtime.streams_moved == 0
    finally:
        runtime.close()
