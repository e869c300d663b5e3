"""The resident memory ``edgeopt serve`` reaches with a serving shape: the figure ``edgeopt plan`` promises.

    weights          the model file(s): llama.cpp maps the GGUF, and every page is read while decoding
    KV, live         cells for running sequences (llama.cpp zero-fills its whole cache when it creates it,
                     so allocated cells are resident from the start, used or not; ONNX Runtime holds each
                     cell three times at a step's peak: edgeopt.formats.onnx.memory)
    KV, prefixes     cells kept only for cached prefixes (streams of their own, or --prefix-cache-memory)
    runtime buffers  the runtime's compute buffer, vocabulary tables and logits rows, and what it builds from
                     the model file beyond the file (edgeopt.backends)
    process          the Python server and its libraries (interpreter, numpy, FastAPI, uvicorn, the runtime's
                     shared library), measured once per backend

The last two are the runtime overhead the budget already reserves (:meth:`KvFacts.overhead_bytes`), split
where the backend says how much of it is the process (``Backend.process_bytes``). What the budget holds
back as a safety margin is not resident: a plan that fits promises ``total_bytes`` <= usable memory.
tests/server/test_resident_memory.py serves real models and holds serve to this figure.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from edgeopt.backends import Backend
from edgeopt.sizing.shape import ServingShape


@dataclass(frozen=True)
class ResidentMemory:
    weights_bytes: int
    kv_live_cells: int
    kv_prefix_cells: int
    kv_bytes_per_token: int
    runtime_buffer_bytes: int
    process_bytes: int
    kv_copies: float = 1.0  # a runtime that holds each cell more than once at a step's peak (ONNX Runtime: 3)

    @property
    def kv_live_bytes(self) -> int:
        return math.ceil(self.kv_live_cells * self.kv_bytes_per_token * self.kv_copies)

    @property
    def kv_prefix_bytes(self) -> int:
        return math.ceil(self.kv_prefix_cells * self.kv_bytes_per_token * self.kv_copies)

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_live_bytes + self.kv_prefix_bytes + self.runtime_buffer_bytes
                + self.process_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"kv_live_bytes": self.kv_live_bytes, "kv_prefix_bytes": self.kv_prefix_bytes,
                               "total_bytes": self.total_bytes}


def resident_memory(entry: Backend, shape: ServingShape) -> ResidentMemory:
    """What serving ``shape`` with ``entry``'s runtime holds resident once every cell and buffer is in use."""
    sizing = shape.sizing
    process = min(entry.memory.process_bytes, sizing.overhead_bytes)
    return ResidentMemory(weights_bytes=sizing.weights_bytes, kv_live_cells=shape.kv_live_cells,
                          kv_prefix_cells=shape.kv_prefix_cells, kv_bytes_per_token=sizing.kv_bytes_per_token,
                          runtime_buffer_bytes=sizing.overhead_bytes - process, process_bytes=process,
                          kv_copies=sizing.kv_copies)
