"""edgeopt.sources.gguf_metadata reads a GGUF header as the gguf library does (values, array lengths, tensor shapes and types)
while skipping the vocabulary, and refuses files that are not GGUF, or cut short, with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import BundleError
from edgeopt.sources.gguf_metadata import read_gguf_metadata
from edgeopt.demo.smollm2 import smollm2_gguf_path as smollm2_gguf


def test_every_value_array_length_and_tensor_shape_equals_the_gguf_librarys():
    from gguf import GGUFReader, GGUFValueType

    path = smollm2_gguf()
    ours = read_gguf_metadata(path)
    reader = GGUFReader(path)
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's own header pseudo-fields
        if field.types[0] == GGUFValueType.ARRAY:
            assert ours.array_length(key) == len(field.data), key
        else:
            assert ours.get(key) == pytest.approx(field.contents()), key
    assert ours.tensor_shapes == {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    assert ours.tensor_types == {t.name: int(t.tensor_type) for t in reader.tensors}
    tokens = reader.fields["tokenizer.ggml.tokens"]
    for index in (0, 1, 2, 1234, len(tokens.data) - 1):
        assert ours.array_string("tokenizer.ggml.tokens", index) == tokens.contents(index)
    assert ours.file_type == "Q4_1" and ours.architecture == "llama"


def test_a_file_that_is_not_gguf_or_is_cut_short_is_refused(tmp_path: Path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(BundleError, match="not a GGUF file"):
        read_gguf_metadata(other)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_gguf().read_bytes()[:5000])  # ends inside the vocabulary
    with pytest.raises(BundleError, match="truncated or corrupt") as refused:
        read_gguf_metadata(cut)
    assert "again" in refused.value.hint
