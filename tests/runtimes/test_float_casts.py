"""ggml's float32 -> float16 cast, used by the GGUF converter: numpy's values bit for bit."""

from __future__ import annotations

import numpy as np

from edgeopt.runtimes.llama_cpp.float_casts import f32_to_f16


def test_same_bits_as_numpy_including_overflow_subnormals_and_nan():
    values = np.random.default_rng(0).standard_normal((300, 70)).astype(np.float32) * 3
    values.flat[:12] = [65504, 65519, 65520, 1e5, -1e5, np.inf, -np.inf, np.nan, 1e-8, 6e-8, 3e-5, -0.0]
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16)
    out = f32_to_f16(values)
    assert out.shape == values.shape and out.dtype == np.float16 and out.flags.c_contiguous
    assert np.array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_a_strided_view_is_cast_as_its_values():
    values = np.arange(24, dtype=np.float32).reshape(4, 6).T  # not C-contiguous
    assert np.array_equal(f32_to_f16(values), values.astype(np.float16))
