"""A ``llama_batch`` whose arrays are numpy buffers we own, filled with vectorised writes.

``llama_batch_init`` would make us write token by token through ctypes (slow for 512-token prefills)
and its ``seq_id`` is an array of per-token pointers. Here every token has exactly one sequence id, so
``seq_id[i]`` points at ``seq_values[i]``: the pointer table is built once, the values are numpy writes.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from edgeopt.runtimes.base import StepInput


class NumpyBatch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = np.zeros(capacity, dtype=np.int32)
        self.positions = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq_values = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        base = self.seq_values.ctypes.data
        self._seq_pointers = (ctypes.POINTER(llama_cpp.llama_seq_id) * capacity)(
            *(ctypes.cast(base + 4 * i, ctypes.POINTER(llama_cpp.llama_seq_id)) for i in range(capacity)))
        self.struct = llama_cpp.llama_batch()
        self.struct.token = self.tokens.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token))
        self.struct.embd = ctypes.cast(None, ctypes.POINTER(ctypes.c_float))
        self.struct.pos = self.positions.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_pos))
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        self.struct.seq_id = ctypes.cast(self._seq_pointers, ctypes.POINTER(ctypes.POINTER(llama_cpp.llama_seq_id)))
        self.struct.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))

    def fill(self, inputs: list[StepInput]) -> int:
        """Lay the inputs out back to back; returns how many logits rows llama.cpp will produce."""
        offset = 0
        outputs = 0
        for item in inputs:
            n = len(item.tokens)
            if n == 1:  # a decode token: scalar writes cost far less than slices on a step's cold caches
                self.tokens[offset] = item.tokens[0]
                self.positions[offset] = item.start_pos
                self.seq_values[offset] = item.slot
                wants = item.want_logits or item.all_logits
                self.logits[offset] = wants
                outputs += wants
                offset += 1
                continue
            end = offset + n
            self.tokens[offset:end] = item.tokens
            self.positions[offset:end] = np.arange(item.start_pos, item.start_pos + n, dtype=np.int32)
            self.seq_values[offset:end] = item.slot
            self.logits[offset:end] = 0
            if item.all_logits:
                self.logits[offset:end] = 1
                outputs += n
            elif item.want_logits:
                self.logits[end - 1] = 1
                outputs += 1
            offset = end
        self.struct.n_tokens = offset
        return outputs


def split_by_outputs(batch: list[StepInput], max_outputs: int) -> list[list[StepInput]]:
    """The batch as consecutive decodes that each ask for at most ``max_outputs`` logits rows (the
    context's n_outputs_max). Only inputs with ``all_logits`` (prompt logprobs) can need more than one:
    they are cut into pieces of at most ``max_outputs`` tokens, decoded in order. Rows come back in the
    same order as from one decode of the whole batch."""
    parts: list[list[StepInput]] = [[]]
    outputs = 0
    for item in batch:
        for piece in _pieces(item, max_outputs):
            rows = len(piece.tokens) if piece.all_logits else int(piece.want_logits)
            if parts[-1] and (outputs + rows > max_outputs or any(p.slot == piece.slot for p in parts[-1])):
                parts.append([])
                outputs = 0
            parts[-1].append(piece)
            outputs += rows
    return parts


def _pieces(item: StepInput, size: int) -> list[StepInput]:
    if not item.all_logits or len(item.tokens) <= size:
        return [item]
    n = len(item.tokens)
    return [StepInput(item.slot, item.tokens[a:a + size], item.start_pos + a, item.want_logits and a + size >= n,
                      all_logits=True) for a in range(0, n, size)]
