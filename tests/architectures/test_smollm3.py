"""SmolLM3's layers without rope (NoPE): llama.cpp's smollm3 graph hard-codes them at every 4th layer
and reads nothing from the file, so the exporter checks the checkpoint's ``no_rope_layers`` against
that pattern and refuses, naming the layers, what it cannot express."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.architectures.smollm3 import llama_cpp_rope_layers


def test_the_nope_layer_is_real_and_honoured(arch_dir, arch_gguf) -> None:
    """The fixture's layer 3 runs without rope in transformers, and llama.cpp matches it (the matrix
    checks KL <= 1e-5 on the same file); here: the pattern really has a NoPE layer to honour."""
    config = json.loads((arch_dir("smollm3") / "config.json").read_text())
    assert config["no_rope_layers"] == [1, 1, 1, 0] == llama_cpp_rope_layers(4)
    import gguf

    fields = {n: f.contents() for n, f in gguf.GGUFReader(arch_gguf("smollm3", "F32")).fields.items()}
    assert fields["general.architecture"] == "smollm3"


@pytest.mark.parametrize("pattern", [[1, 0, 1, 1], [1, 1, 1, 1]])
def test_other_nope_patterns_are_refused(pattern: list[int], arch_dir, tmp_path: Path) -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    model = shutil.copytree(arch_dir("smollm3"), tmp_path / "smol")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "no_rope_layers": pattern}))
    with pytest.raises(ExportError) as refused:
        GGUFExporter().export(model, tmp_path / "out", "F32", {})
    differ = [i for i, (a, b) in enumerate(zip(pattern, [1, 1, 1, 0])) if a != b]
    assert f"layers {differ} would compute differently" in refused.value.message
    assert "--format onnx" in refused.value.hint
    assert not (tmp_path / "out" / "model.gguf").exists()
