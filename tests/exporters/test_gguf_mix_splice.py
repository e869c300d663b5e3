"""A group's file for the mix's sensitivity measurement is spliced from bytes already quantized
(exporters/gguf/mix/splice.py): the same tensors, types and bytes as llama.cpp's quantization of that group, and
llama.cpp scores it the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.exporters.gguf.mix.splice import TensorStore, splice
from edgeopt.exporters.gguf.quantize import quantize_gguf
from edgeopt.exporters.gguf.scorer import GGUFScorer
from edgeopt.exporters.gguf.tensor_data import tensor_bytes, tensor_infos


def test_a_spliced_group_file_is_the_one_llama_cpp_quantizes(tiny_gguf_factory, tmp_path: Path) -> None:
    unquantized = tiny_gguf_factory("llama-gqa", "F16")
    reference, typed, spliced, direct = (tmp_path / f"{n}.gguf" for n in ("reference", "typed", "spliced", "direct"))
    quantize_gguf(unquantized, reference, "Q8_0", 1, None, types={})
    quantized = [name for name, info in tensor_infos(reference).items() if info.type_name == "Q8_0"]
    quantize_gguf(unquantized, typed, "Q8_0", 1, None, types=dict.fromkeys(quantized, "IQ4_NL"))
    group = [name for name in quantized if name.startswith("blk.1.")]
    assert group
    store = TensorStore(tmp_path / "store.bin")
    for info, data in tensor_bytes(typed, group):
        store.put(info.name, info.type_name, data)
    splice(reference, group, store, spliced)
    quantize_gguf(unquantized, direct, "Q8_0", 1, None, types=dict.fromkeys(group, "IQ4_NL"))

    ours, theirs = dict(tensor_bytes(spliced, tensor_infos(direct))), dict(tensor_bytes(direct, tensor_infos(direct)))
    assert {i.name: i.type_name for i in ours} == {i.name: i.type_name for i in theirs}
    assert {i.name for i in ours if i.type_name == "IQ4_NL"} == set(group)
    by_name = {i.name: data for i, data in theirs.items()}
    for info, data in ours.items():
        assert data.tobytes() == by_name[info.name].tobytes(), info.name
    tokens = [1, 5, 9, 14, 3, 7, 2, 11]
    scores = []
    for path in (spliced, direct):
        scorer = GGUFScorer(path, context=16, threads=1)
        try:
            scores.append(scorer.score(tokens))
        finally:
            scorer.close()
    assert np.array_equal(scores[0], scores[1])
