"""The mix reads tensors through edgeopt's header reader (exporters/gguf/tensor_data.py) instead of gguf-py's
GGUFReader, which decodes the whole vocabulary on every opening: the same types, shapes, bytes and values."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from edgeopt.exporters.gguf.tensor_data import tensor_bytes, tensor_infos


@pytest.mark.parametrize("quant", ["F16", "Q8_0"])
def test_tensors_read_as_gguf_py_reads_them(tiny_gguf_factory, quant: str) -> None:
    path = tiny_gguf_factory("llama-gqa", quant)
    reference = {t.name: t for t in GGUFReader(path).tensors}
    infos = tensor_infos(path)
    assert set(infos) == set(reference)
    read = dict(tensor_bytes(path, [*reference, "not.a.tensor"]))
    assert {info.name for info in read} == set(reference)  # a name the file lacks is left out
    for info, data in read.items():
        theirs = reference[info.name]
        assert (info.type_name, info.elements, info.row_length) == (theirs.tensor_type.name, int(theirs.n_elements),
                                                                     int(theirs.shape[0]))
        assert data.tobytes() == np.asarray(theirs.data).tobytes()
        ours = dequantize(data, theirs.tensor_type)
        assert np.array_equal(ours, dequantize(theirs.data, theirs.tensor_type)), info.name
    assert any(info.type_name == quant for info in read)
