"""``--quant MIX`` / ``--size``: a GGUF whose per-tensor types were chosen by measured sensitivity to fit a
size (exporters/gguf/mix/build.py), written by llama.cpp's quantizer and readable by it; refused, before any
work, where it cannot be made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgeopt.errors import ConfigError
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.exporters.gguf.mix.palette import palette
from edgeopt.exporters.gguf.quant_types import type_bytes
from edgeopt.optimize.export_options import export_options


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeopt.demo.corpus import stdlib_text

    path = tmp_path_factory.mktemp("calib") / "calibration.txt"
    path.write_text(stdlib_text(40_000))
    return path


@pytest.fixture(scope="module")
def two_palette_model(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """Rows of 256 (k-quants and IQ types) and of 544 (32-weight blocks only, as SmolLM2's 576)."""
    from tests.fixtures.tiny_models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("mix") / "m", "llama-gqa", tiny_tokenizer_dir, hidden_size=256,
                            intermediate_size=544, num_layers=3)


def optimize(model: Path, out: Path, calibration: Path | None, quant: str | None = None, **options: object) -> Any:
    given = export_options(calibration_data=calibration) | {"calibration_chunks": 2, **options}
    return run_optimize(OptimizeOptions(model=str(model), output=out, format="gguf", quant=quant, evaluate=False,
                                        export_options=given), report=lambda _m: None)


def test_a_mix_fits_its_size_and_holds_the_types_it_records(two_palette_model: Path, calibration: Path,
                                                            tmp_path: Path) -> None:
    import gguf

    from edgeopt.exporters.gguf.scorer import GGUFScorer

    out = tmp_path / "bundle"
    # Halfway between every tensor at its smallest type and every tensor at Q8_0: a real choice to make.
    manifest = optimize(two_palette_model, tmp_path / "q8", None, quant="Q8_0")
    reader_q8 = gguf.GGUFReader(tmp_path / "q8" / manifest.model_file)
    quantized = [t for t in reader_q8.tensors if t.tensor_type.name == "Q8_0"]
    smallest = sum(type_bytes(palette(int(t.shape[0]))[0], int(t.n_elements)) for t in quantized)
    largest = sum(type_bytes("Q8_0", int(t.n_elements)) for t in quantized)
    size = (tmp_path / "q8" / manifest.model_file).stat().st_size - (largest - smallest) // 2

    manifest = optimize(two_palette_model, out, calibration, mix_size_bytes=size)
    assert manifest.quant == "MIX"
    model_file = out / manifest.model_file
    assert model_file.stat().st_size <= size
    mix = manifest.export["mix"]
    assert mix["budget_bytes"] == size and mix["predicted_kl"] >= 0
    file_types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(model_file).tensors}
    assert mix["types"] == {t.name: file_types[t.name] for t in quantized}  # what was recorded is in the file
    assert len(set(mix["types"].values())) >= 2, mix["types"]  # the budget forces a mix
    # llama.cpp's own types that fit were measured beside it; what was written measures no higher than any
    assert mix["recipe_kl"] and mix["written"] in ("mix", *mix["recipe_kl"])
    written_kl = mix["measured_kl"] if mix["written"] == "mix" else mix["recipe_kl"][mix["written"]]
    assert written_kl <= min(mix["recipe_kl"].values()) and mix["reason"]
    assert set(mix["group_kl"]) and all(kl >= 0 for kl in mix["group_kl"].values())
    assert "imatrix.gguf" in json.loads((out / "manifest.json").read_text())["files"]
    scorer = GGUFScorer(model_file, context=64)  # llama.cpp reads it
    try:
        assert scorer.score(scorer.tokenize("hello world"))[-1].shape == (scorer.vocab_size,)
    finally:
        scorer.close()


def test_a_size_below_every_tensor_at_its_smallest_type_is_refused_with_the_size_that_would_do(
        two_palette_model: Path, calibration: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--size of at least"):
        optimize(two_palette_model, tmp_path / "b", calibration, mix_size_bytes=100 * 1024)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("fmt", "quant", "needle"), [
    ("torch", None, "no per-tensor mix"), ("gguf", "Q4_K_M", "cannot be combined with --quant Q4_K_M"),
    ("onnx", "int8", "cannot be combined with --quant int8")])
def test_size_is_refused_where_no_mix_is_made(fmt: str, quant: str | None, needle: str, tiny_llama_dir: Path,
                                             tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=needle):
        run_optimize(OptimizeOptions(model=str(tiny_llama_dir), output=tmp_path / "b", format=fmt, quant=quant,
                                     evaluate=False, export_options={"mix_size_bytes": 50 * 2**20}),
                     report=lambda _m: None)
    assert not (tmp_path / "b").exists()


def test_plan_shows_what_a_mix_of_that_size_leaves_for_the_kv_cache(tiny_llama_dir: Path) -> None:
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    # The tiny model is ~301 KiB in F16: a size above that is refused (edgeopt.byte_sizes), so plan 200 KiB.
    result = CliRunner().invoke(app, ["plan", str(tiny_llama_dir), "--size", "200KiB", "--json"])
    assert result.exit_code == 0, result.output
    mix = next(c for c in json.loads(result.output)["candidates"] if c["quant"] == "MIX")
    assert mix["format"] == "gguf" and mix["weight_bytes"] == 200 * 2**10 and mix["kv_token_capacity"] > 0
