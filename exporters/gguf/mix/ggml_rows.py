"""Rows of a tensor quantized (and de-quantized) in this process by ggml's own quantizer (``ggml_quantize_chunk``,
the function llama.cpp's quantizer calls for every chunk of rows): the same bytes ``llama_model_quantize`` writes for the same
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


_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):
    """ggml.h's ``struct ggml_type_traits``, up to the de-quantizer."""

    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64), ("blck_size_interleave", ctypes.c_int64),
                ("type_size", ctypes.c_size_t), ("is_quantized", ctypes.c_bool), ("to_float", _TO_FLOAT)]


@cache
def _ggml() -> ctypes.CDLL:
    import llama_cpp  # noqa: F401 - loads the libggml-base llama.cpp's quantizer uses

    lib = ctypes.CDLL("libggml-base.so.0")  # that copy (the loader answers by soname)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
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


def dequantize_rows(ttype: str, blocks: np.ndarray) -> np.ndarray:
    """Rows of ``ttype`` blocks (as :func:`quantize_rows` gives them, or a file holds them) back to float32, by ggml's
    own de-quantizer: the values llama.cpp computes with, several times quicker than gguf-py's numpy."""
    blocks = np.ascontiguousarray(blocks)
    if ttype == "F32":  # ggml has no de-quantizer for what is already float32
        return blocks.view(np.float32)
    lib = _ggml()
    traits = lib.ggml_get_type_traits(int(GGMLQuantizationType[ttype])).contents
    width = blocks.shape[-1] // traits.type_size * traits.blck_size
    out = np.empty((*blocks.shape[:-1], width), dtype=np.float32)
    traits.to_float(blocks.ctypes.data, out.ctypes.data, out.size)
    return out
