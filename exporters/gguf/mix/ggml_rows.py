"""Rows of a tensor quantized in this process by ggml's own quantizer (``ggml_quantize_chunk``, the function
llama.cpp's quantizer calls for every chunk of rows): the same bytes ``llama_model_quantize`` writes for the same
type and importance matrix, without writing, re-opening and re-reading a model file per type.

The mix measures every tensor's rounding error at every type of its palette (exporters/gguf/mix/costs.py). Done
with one llama.cpp quantization per type it quantized the whole model eight times over, writing a file each time:
61 s of SmolLM2-135M's 203 s mix. Here a tensor's rows are quantized straight from its float32 values, on the
threads asked (ctypes lets go of the GIL for the call), and only as many rows as the error needs.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np
from gguf import GGMLQuantizationType


@cache
def _ggml() -> ctypes.CDLL:
    import llama_cpp  # noqa: F401 - loads the libggml-base llama.cpp's quantizer uses

    lib = ctypes.CDLL("libggml-base.so.0")  # that copy (the loader answers by soname)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    return lib


def quantize_rows(ttype: str, rows: np.ndarray, importance: np.ndarray | None, threads: int = 2) -> np.ndarray:
    """``rows`` (float32, rows x columns) quantized to ``ttype``, weighing each column's rounding by
    ``importance`` (the matrix's per-column mean x^2, as llama.cpp's quantizer is given it; None: uniform):
    one row of block bytes per row, as gguf.quants.dequantize takes them."""
    lib = _ggml()
    kind = int(GGMLQuantizationType[ttype])
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    count, width = rows.shape
    weights = None if importance is None else np.ascontiguousarray(importance, dtype=np.float32)
    if weights is not None and weights.shape != (width,):
        raise ValueError(f"an importance of {weights.shape} for rows of {width}")
    out = np.empty((count, lib.ggml_row_size(kind, width)), dtype=np.uint8)
    weights_pointer = None if weights is None else weights.ctypes.data

    def part(first: int, last: int) -> None:
        # ggml_quantize_chunk's start is an element index into src and dst alike, both addressed from their
        # beginnings; a slice's own pointers with start 0 say the same without the arithmetic.
        lib.ggml_quantize_chunk(kind, rows[first:last].ctypes.data, out[first:last].ctypes.data, 0,
                                last - first, width, weights_pointer)

    bounds = np.linspace(0, count, max(1, min(threads, count)) + 1, dtype=int)
    with ThreadPoolExecutor(len(bounds) - 1) as pool:
        list(pool.map(part, bounds[:-1], bounds[1:]))
    return out
