"""Every tensor's rounding error per type (exporters/gguf/mix/measure.py): exact for the type a tensor is quantized
whole at, estimated from a sample of rows for the others, and the probe type a group is measured at as large as the
palette's smallest (exporters/gguf/mix/palette.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from edgeopt.exporters.gguf.mix.measure import MIN_SAMPLED_ROWS, SAMPLED_EVERY, rounding_errors
from edgeopt.exporters.gguf.mix.palette import palette, probe_type
from edgeopt.exporters.gguf.quant_types import type_bytes
from edgeopt.exporters.gguf.tensor_data import TensorInfo


def f16_tensor(rows: int, width: int, seed: int = 0) -> tuple[TensorInfo, np.ndarray]:
    values = np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float16)
    return TensorInfo("blk.0.ffn_up.weight", "F16", (width, rows), 0), values.view(np.uint8).reshape(rows, width * 2)


def exact_error(ttype: str, info: TensorInfo, data: np.ndarray, importance: np.ndarray) -> float:
    from edgeopt.exporters.gguf.mix.ggml_rows import quantize_rows

    original = dequantize(data, GGMLQuantizationType.F16)
    rounded = dequantize(quantize_rows(ttype, original, importance), GGMLQuantizationType[ttype])
    return float(np.square(rounded - original, dtype=np.float64).sum(axis=0) @ importance)


@pytest.mark.parametrize("width", [256, 544])
def test_the_whole_type_is_exact_and_the_sampled_types_close(width: int) -> None:
    rows = MIN_SAMPLED_ROWS * SAMPLED_EVERY * 2 + 3  # sampled, and more rows than one read of them in a step
    info, data = f16_tensor(rows, width)
    importance = np.random.default_rng(1).uniform(0.1, 3.0, width).astype(np.float32)
    probe, *types = dict.fromkeys((probe_type(width), *palette(width)))
    measured = rounding_errors(info, data, [probe, *types], importance, threads=2, whole_type=probe)
    assert measured.errors[probe] == pytest.approx(exact_error(probe, info, data, importance), rel=1e-9)
    assert measured.quantized is not None and measured.quantized.shape[0] == rows
    for ttype in types:  # an eighth of the rows stands for the whole within a few percent
        assert measured.errors[ttype] == pytest.approx(exact_error(ttype, info, data, importance), rel=0.05), ttype
    ordered = [measured.errors[t] for t in palette(width)]
    assert ordered == sorted(ordered, reverse=True)  # more bits, less error, as the palette is ordered


def test_a_small_tensor_is_measured_whole() -> None:
    info, data = f16_tensor(MIN_SAMPLED_ROWS - 1, 256)
    importance = np.ones(256, np.float32)
    measured = rounding_errors(info, data, ["Q4_K"], importance, threads=1)
    assert measured.errors["Q4_K"] == pytest.approx(exact_error("Q4_K", info, data, importance), rel=1e-9)
    assert measured.quantized is None  # no whole type asked


@pytest.mark.parametrize("width", [256, 544, 576, 1536])
def test_the_probe_type_takes_the_bytes_of_the_palettes_smallest(width: int) -> None:
    """As large as the smallest type, so it adds about as much error to the group (Q3_K for IQ3_S, Q4_0 for IQ4_NL)."""
    assert probe_type(width) not in palette(width)
    assert type_bytes(probe_type(width), width * 64) == type_bytes(palette(width)[0], width * 64)
