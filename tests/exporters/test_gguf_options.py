"""GGUF export flags (exporters/gguf/options.py): --no-self-calibration does what it says where it means
something and is refused, before any work, where it would change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.optimize.export_options import export_options


def optimize(model: Path, out: Path, fmt: str, quant: str, options: dict) -> object:
    return run_optimize(OptimizeOptions(model=str(model), output=out, format=fmt, quant=quant, evaluate=False,
                                        export_options=options), report=lambda _m: None)


def test_without_self_calibration_a_k_quant_is_made_without_a_matrix(tiny_llama_dir: Path, tmp_path: Path) -> None:
    manifest = optimize(tiny_llama_dir, tmp_path / "b", "gguf", "Q4_K_M", export_options(self_calibration=False))
    assert "imatrix" not in manifest.export and not (tmp_path / "b" / "imatrix.gguf").exists()


@pytest.mark.parametrize(("fmt", "quant", "with_text", "needle"), [
    ("gguf", "Q8_0", False, "changes nothing with --format gguf --quant Q8_0"),
    ("onnx", "int8", False, "changes nothing with --format onnx --quant int8"),
    ("gguf", "Q4_K_M", True, "with --calibration-data"),
])
def test_no_self_calibration_is_refused_where_it_changes_nothing(fmt: str, quant: str, with_text: bool, needle: str,
                                                                 tiny_llama_dir: Path, tmp_path: Path) -> None:
    text = tmp_path / "calibration.txt"
    text.write_text("Some calibration text. " * 400)
    options = export_options(calibration_data=text if with_text else None)
    with pytest.raises(ConfigError, match=needle):
        optimize(tiny_llama_dir, tmp_path / "b", fmt, quant, options | export_options(self_calibration=False))
    assert not (tmp_path / "b").exists()
