"""``--quant`` in any case, as llama-quantize and Ollama accept it; stored under the format's own spelling."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from tests.cli.test_cli import run_main

runner = CliRunner()


@pytest.mark.parametrize("fmt, given, canonical", [
    ("gguf", "q4_k_m", "Q4_K_M"), ("gguf", "q8_0", "Q8_0"), ("gguf", "Q8_0", "Q8_0"), ("gguf", "iq4_xs", "IQ4_XS"),
    ("onnx", "INT8", "int8"), ("onnx", "Int8-Static", "int8-static"), ("onnx", "INT4", "int4"),
    ("torch", "BF16", "bf16"),
])
def test_optimize_accepts_a_quant_name_in_any_case(tiny_llama_dir: Path, tmp_path: Path, fmt: str, given: str,
                                                   canonical: str):
    result = runner.invoke(app, ["optimize", str(tiny_llama_dir), "--format", fmt, "--quant", given, "--dry-run",
                                 "-o", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert f"will write {fmt}:{canonical} " in result.output


def test_the_bundle_stores_the_canonical_name(tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # the default output directory is named after the quant
    result = runner.invoke(app, ["optimize", str(tiny_llama_dir), "--format", "gguf", "--quant", "q8_0", "--no-eval"])
    assert result.exit_code == 0, result.output
    bundle = tmp_path / f"{tiny_llama_dir.name}-host-q8_0"
    manifest = load_bundle(bundle)
    assert manifest.quant == "Q8_0"


def test_an_unknown_quant_is_refused_with_the_valid_names(tiny_llama_dir: Path, tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch):
    code, out = run_main(["optimize", str(tiny_llama_dir), "--format", "onnx", "--quant", "int3", "--dry-run",
                          "-o", str(tmp_path / "b")], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in out
    assert "'int3'" in out and "int8-static" in out and "int4" in out
    code, out = run_main(["optimize", str(tiny_llama_dir), "--format", "gguf", "--quant", "q9_k", "--dry-run",
                          "-o", str(tmp_path / "b")], capsys, monkeypatch)
    assert code == 1 and "'q9_k'" in out and "Q4_K_M" in out
