"""A sequence's KV copied into another stream through llama.cpp's state API, where that costs less than
llama.cpp's own cross-stream copy.

In the streams layout llama.cpp copies between streams only whole (kv_layouts.StreamsLayout), and does so
at the next ``llama_decode`` as a memory update: every cell of the stream, held or not, and then a new
worst-case graph reservation, the graph it would have reused dropped. On SmolLM2-135M (one thread, AMD
EPYC) that decode took 7 ms longer with 512-cell streams and 13 ms longer with 2048-cell ones. Reading the
source's held cells out (``llama_state_seq_get_data``) and writing them into the target
(``llama_state_seq_set_data``, which empties the target first) moves only those cells, at once: 1 ms for
128 cells of that model, 4 ms for 512. So it is taken for a source holding at most half a stream, where the
KV lives in host memory (a GPU's or an RPC worker's would cross to the host and back, where llama.cpp's
copy stays on the device), and within STATE_COPY_MAX_BYTES: the buffer exists only during the copy, on top
of the memory the KV cache was sized to.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

STATE_COPY_MAX_BYTES = 16 * 1024 * 1024


class StateCopy:
    def __init__(self, ctx: llama_cpp.llama_context_p) -> None:
        self._ctx = ctx
        self.copies = 0  # made here rather than by llama.cpp's whole-stream copy (diagnostics, tests)

    def copy(self, source: int, target: int) -> bool:
        """Replace llama.cpp sequence ``target``'s KV with ``source``'s; False (nothing done) when the state
        is above STATE_COPY_MAX_BYTES. Both sequences' data must be in place (no cross-stream copy pending)."""
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, source))
        if size > STATE_COPY_MAX_BYTES:
            return False
        buffer = np.empty(size, dtype=np.uint8)  # not zero-filled: a ctypes array would clear it first (~2x)
        pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        written = int(llama_cpp.llama_state_seq_get_data(self._ctx, pointer, size, source))
        if written != size or int(llama_cpp.llama_state_seq_set_data(self._ctx, pointer, size, target)) != size:
            return False
        self.copies += 1
        return True
