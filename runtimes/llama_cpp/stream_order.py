"""Per-sequence KV streams (``kv_unified = false``): lay a step out so llama.cpp decodes it in one pass.

llama.cpp cuts a batch over per-sequence streams into micro-batches that each hold *consecutive,
increasing* sequence ids (``llama_batch_allocr::split_equal`` with ``sequential``): a step over streams
[3, 0, 1] or [0, 1, 3] is decoded in two passes, and every pass re-reads all the weights. Measured on
the ~200M bench model (AMD EPYC, 1 thread, 16 sequences x 1 token, CPU per step): streams 0..15 in
order 87 ms, the same shuffled 208 ms, with 4 holes 186 ms. Requests that arrive and finish at
different times make both the usual case, so a step is laid out here:

* inputs sorted by stream, and their logits rows put back in the engine's order afterwards;
* every stream in a hole between two used streams gets one throwaway token (no logits) at its next
  position, removed after the decode: one more row of the same matrix products instead of another
  pass over the weights. A hole whose stream is full, or padding beyond the batch buffer, is left as
  it is (llama.cpp then splits there, as before).

Prefill chunks longer than one token still take more passes: llama.cpp gives every sequence of a
micro-batch the same number of tokens (llama-server decodes the same way).

A pass attends, in every one of its streams, over as many cells as its *longest* stream holds (llama.cpp's
``n_kv``, rounded up to 256). A hole held by a long cached prefix (a 1,000-token conversation parked where
its request ran) would make the throwaway token, and with it all sixteen short sequences, attend over
1,000+ cells: measured on the bench model, 16 streams x 128 tokens after a few multi-turn chats ran at
0.43x the speed of a fresh server (server CPU per token 2.2x). The runtime places a new sequence so that
no cached prefix is left between it and the running ones (moving one up when it must), and before laying
a step out moves what is still in the way (:func:`hole_moves`) to empty streams outside the step's range
(one whole-stream copy each, once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgeopt.runtimes.base import StepInput

PAD_TOKEN = 0  # any valid token id: its KV cell is removed right after the decode
KV_PAD = 256  # llama.cpp rounds a pass's attention span up to a multiple of this (llama_kv_cache::get_n_kv)


@dataclass(frozen=True)
class StreamStep:
    inputs: list[StepInput]  # what llama.cpp decodes: ``slot`` is the stream, sorted, holes padded
    padding: list[tuple[int, int]]  # (stream, position) of every throwaway token
    row_order: np.ndarray | None  # engine-order logits rows = decoded rows[row_order]; None: already in order


def lay_out(batch: list[StepInput], stream_of: list[int], held: Callable[[int], int], stream_cells: int,
            capacity: int) -> StreamStep:
    """``batch`` (engine sequence ids) as one pass over consecutive streams, as far as room allows.
    ``held(stream)``: positions the stream holds; ``capacity``: most tokens one decode may carry."""
    translated = renamed(batch, stream_of)
    order = sorted(range(len(batch)), key=lambda i: translated[i].slot)
    used = {item.slot for item in translated}
    room = capacity - sum(len(item.tokens) for item in translated)
    padding = []
    if used:
        for stream in range(min(used) + 1, max(used)):
            if stream in used or room == 0:
                continue
            position = held(stream)
            if position < stream_cells:
                padding.append((stream, position))
                room -= 1
    pads = [StepInput(stream, [PAD_TOKEN], position, False) for stream, position in padding]
    inputs = sorted([translated[i] for i in order] + pads, key=lambda item: item.slot)
    return StreamStep(inputs, padding, _row_order(batch, order))


def hole_moves(batch: list[StepInput], stream_of: list[int], held: Callable[[int], int],
               streams: int) -> list[tuple[int, int]]:
    """(hole, empty) pairs of streams: each hole of the step whose padding token would lengthen the whole
    pass's attention span, longest first, with an empty stream outside the step's range to move it to.
    Holes left over when fewer streams out there are empty stay (padded)."""
    if len(batch) < 2:
        return []
    used = {stream_of[item.slot] for item in batch}
    low, high = min(used), max(used)
    span = _span(max(item.start_pos + len(item.tokens) for item in batch))
    long = sorted((s for s in range(low + 1, high) if s not in used and _span(held(s) + 1) > span), key=held,
                  reverse=True)
    if not long:
        return []
    empty = [s for s in reversed(range(streams)) if not low <= s <= high and held(s) == 0]
    return list(zip(long, empty))


def _span(cells: int) -> int:
    return max(KV_PAD, -(-cells // KV_PAD) * KV_PAD)


def renamed(batch: list[StepInput], stream_of: list[int]) -> list[StepInput]:
    """``batch`` with each engine sequence id replaced by llama.cpp's (``stream_of[id]``)."""
    return [StepInput(stream_of[item.slot], item.tokens, item.start_pos, item.want_logits, item.all_logits)
            for item in batch]  # not dataclasses.replace: this runs every step, and replace costs 10x more


def _row_order(batch: list[StepInput], order: list[int]) -> np.ndarray | None:
    """Rows come back in decode order (one per want_logits input, len(tokens) per all_logits input);
    the index array that puts them back in the engine's order, None when they already are (a lone
    sequence, streams taken in order: no fancy-indexing copy on the common decode step)."""
    if all(i == k for k, i in enumerate(order)):
        return None
    rows = [len(item.tokens) if item.all_logits else int(item.want_logits) for item in batch]
    decoded_start = {}
    start = 0
    for i in order:
        decoded_start[i] = start
        start += rows[i]
    return np.array([decoded_start[i] + k for i in range(len(batch)) for k in range(rows[i])], dtype=np.int64)
