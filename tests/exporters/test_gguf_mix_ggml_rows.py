"""Rows quantized in process by ggml (exporters/gguf/mix/ggml_rows.py) are the bytes llama.cpp's quantizer writes
for the same tensor, type and importance matrix: every type of both palettes, k-quant and IQ types included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.mix.ggml_rows import quantize_rows
from edgeopt.exporters.gguf.mix.palette import palette
from edgeopt.exporters.gguf.quantize import quantize_gguf
from edgeopt.exporters.gguf.tensor_data import tensor_bytes, tensor_infos


@pytest.fixture
def unquantized(palette_rows_f16: Path) -> Path:
    return palette_rows_f16


def test_in_process_rows_are_llama_cpps_bytes_for_every_palette_type(unquantized: Path, tmp_path: Path) -> None:
    infos = {name: info for name, info in tensor_infos(unquantized).items() if len(info.shape) == 2}
    rng = np.random.default_rng(0)
    # a matrix for every tensor but the embeddings (llama.cpp has none for a row lookup): weighted and plain rows
    matrix = ImportanceMatrix(sums={n: rng.uniform(0.1, 4.0, i.row_length).astype(np.float32) for n, i in infos.items()
                                    if n != "token_embd.weight"},
                              counts={n: 3 for n in infos if n != "token_embd.weight"}, chunk_count=1, chunk_size=8)
    importance = matrix.means()
    originals = {info.name: dequantize(data, GGMLQuantizationType[info.type_name])
                 for info, data in tensor_bytes(unquantized, infos)}
    checked = set()
    for ttype in dict.fromkeys(palette(256) + palette(544)):
        members = {name: ttype for name, info in infos.items() if ttype in palette(info.row_length)}
        path = tmp_path / f"{ttype}.gguf"
        quantize_gguf(unquantized, path, "Q8_0", 2, matrix, types=members)
        for info, data in tensor_bytes(path, members):
            assert info.type_name == ttype
            ours = quantize_rows(ttype, originals[info.name], importance.get(info.name), threads=2)
            assert ours.tobytes() == data.tobytes(), (info.name, ttype)
            checked.add((info.row_length, ttype, info.name in importance))
        path.unlink()
    assert {(256, "IQ3_S", True), (256, "Q4_K", True), (544, "IQ4_NL", True), (256, "Q8_0", False)} <= checked


def test_an_importance_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match="importance"):
        quantize_rows("Q8_0", np.zeros((2, 64), np.float32), np.ones(32, np.float32))


@pytest.mark.parametrize("ttype", ["F16", "Q8_0", "Q4_0", "Q5_1", "IQ4_NL", "IQ3_S", "Q3_K", "Q4_K", "Q6_K"])
def test_ggml_de_quantizes_to_gguf_pys_values(ttype: str) -> None:
    from edgeopt.exporters.gguf.mix.ggml_rows import dequantize_rows

    width = 256
    rows = np.random.default_rng(3).standard_normal((40, width)).astype(np.float32)
    blocks = quantize_rows(ttype, rows, None, threads=2)
    assert np.array_equal(dequantize_rows(ttype, blocks), dequantize(blocks, GGMLQuantizationType[ttype]))
    assert np.array_equal(dequantize_rows("F32", rows.view(np.uint8)), rows)
