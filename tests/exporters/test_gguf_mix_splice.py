"""Files the mix measures and writes are spliced from tensors already quantized (exporters/gguf/mix/splice.py):
byte for byte the file llama.cpp's quantizer writes with the same types and importance matrix, for a group's probe
types, a llama.cpp recipe (its dry run's types) and a mix of per-tensor types, and llama.cpp scores it the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.mix.splice import TensorStore, _with_file_type, quantize_into, splice
from edgeopt.exporters.gguf.quantize import quantize_gguf, recipe_types
from edgeopt.exporters.gguf.scorer import GGUFScorer
from edgeopt.exporters.gguf.tensor_data import tensor_infos


@pytest.fixture
def unquantized(palette_rows_f16: Path) -> Path:
    return palette_rows_f16


def _matrix(unquantized: Path) -> ImportanceMatrix:
    infos = {n: i for n, i in tensor_infos(unquantized).items() if len(i.shape) == 2 and n != "token_embd.weight"}
    rng = np.random.default_rng(0)
    return ImportanceMatrix(sums={n: rng.uniform(0.1, 4.0, i.row_length).astype(np.float32) for n, i in infos.items()},
                            counts=dict.fromkeys(infos, 3), chunk_count=1, chunk_size=8)


@pytest.mark.parametrize("case", ["group", "recipe", "mix"])
def test_a_spliced_file_is_the_one_llama_cpp_writes(unquantized: Path, tmp_path: Path, case: str) -> None:
    matrix = _matrix(unquantized)
    reference, spliced, direct = (tmp_path / f"{n}.gguf" for n in ("reference", "spliced", "direct"))
    quantize_gguf(unquantized, reference, "Q8_0", 1, matrix, types={})
    quantized = [name for name, info in tensor_infos(reference).items() if info.type_name == "Q8_0"]
    if case == "recipe":  # every tensor of the file, norms included, as llama.cpp's Q4_K_M gives them
        types, file_type = recipe_types(unquantized, "Q4_K_M", 1, matrix), "Q4_K_M"
        quantize_gguf(unquantized, direct, "Q4_K_M", 1, matrix)
    else:
        palette = ("IQ4_NL", "Q5_0", "IQ3_S", "Q4_K", "Q6_K") if case == "mix" else ("IQ4_NL",)
        chosen = quantized if case == "mix" else [name for name in quantized if name.startswith("blk.1.")]
        types = {name: palette[k % len(palette)] if tensor_infos(reference)[name].row_length % 256 == 0
                 else palette[k % 2] for k, name in enumerate(chosen)}
        file_type = "Q5_0" if case == "mix" else None
        quantize_gguf(unquantized, direct, file_type or "Q8_0", 1, matrix, types=types)
    store = TensorStore(tmp_path / "store.bin")
    quantize_into(store, unquantized, types, matrix.means(), threads=2)
    splice(reference, types, store, spliced, file_type)

    assert spliced.read_bytes() == direct.read_bytes()
    tokens = [1, 5, 9, 14, 3, 7, 2, 11]
    scores = []
    for path in (spliced, direct):
        scorer = GGUFScorer(path, context=16, threads=1)
        try:
            scores.append(scorer.score(tokens))
        finally:
            scorer.close()
    assert np.array_equal(scores[0], scores[1])


def test_each_tensor_and_type_is_quantized_once(unquantized: Path, tmp_path: Path) -> None:
    store = TensorStore(tmp_path / "store.bin")
    name = next(n for n, i in tensor_infos(unquantized).items() if i.row_length % 256 == 0 and len(i.shape) == 2)
    quantize_into(store, unquantized, {name: "Q4_K"}, {}, threads=1)
    size = store.path.stat().st_size
    quantize_into(store, unquantized, {name: "Q4_K"}, {}, threads=1)
    assert store.path.stat().st_size == size
    quantize_into(store, unquantized, {name: "Q6_K"}, {}, threads=1)
    assert (name, "Q6_K") in store and store.path.stat().st_size > size


def test_a_header_without_a_file_type_is_refused() -> None:
    with pytest.raises(ExportError, match="general.file_type"):
        _with_file_type(b"GGUF no such key here", 15)
