"""Quantization through llama.cpp, and the planner's size estimate against the files it produces."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.planning.checkpoint import weight_bytes
from edgeopt.exporters.gguf.quant_types import tensor_type
from edgeopt.exporters.gguf.tensor_names import gguf_name
from tests.fixtures.tiny_models import build_tiny_model


@pytest.fixture(scope="module")
def k_quant_model(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """Rows of 256 and 512 so k-quants apply without fallbacks; 8 layers so the _M mixes vary by layer."""
    return build_tiny_model(tmp_path_factory.mktemp("kq"), "llama-gqa", tiny_tokenizer_dir,
                            hidden_size=256, intermediate_size=512, num_layers=8)


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeopt.demo.corpus import stdlib_text

    path = tmp_path_factory.mktemp("calibration") / "calibration.txt"
    path.write_text(stdlib_text(20_000))
    return path


def _export(model_dir: Path, out: Path, quant: str, calibration: Path | None = None) -> Path:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    options = {"threads": 2} | ({"calibration_data": str(calibration), "calibration_chunks": 2} if calibration else {})
    result = GGUFExporter().export(model_dir, out, quant, options)
    assert result.runtime == "llama_cpp" and result.quant == quant
    return out / result.model_file


def _types_in_file(path: Path) -> dict[str, str]:
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


# The types that use an importance matrix most (IQ*, Q2_K_S) are made with calibration text, as optimize makes them.
CALIBRATED = ("IQ4_XS", "IQ3_M", "IQ3_XXS", "IQ2_M", "Q2_K_S")


@pytest.mark.parametrize("quant", ["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_K_S", "Q4_0", "Q3_K_M",
                                   "Q2_K", *CALIBRATED])
def test_planner_estimate_within_5_percent(quant: str, k_quant_model: Path, tmp_path: Path,
                                           calibration_file: Path) -> None:
    path = _export(k_quant_model, tmp_path, quant, calibration_file if quant in CALIBRATED else None)
    spec = load_model_spec(str(k_quant_model))
    predicted, actual = weight_bytes(spec, "gguf", quant), path.stat().st_size
    assert abs(predicted - actual) / actual <= 0.05, f"{quant}: predicted {predicted}, file {actual}"
    # The estimate is right for the right reason: every tensor has the type the estimator assumed.
    expected = {gguf_name(t.name): tensor_type(t, quant, spec) for t in spec.tensors()}
    assert _types_in_file(path) == expected


@pytest.mark.parametrize("quant", ["Q4_K_M", "Q6_K"])
def test_shape_fallbacks_match_llama_cpp(quant: str, tiny_model_factory, tiny_gguf_factory) -> None:
    """64-wide rows cannot hold 256-blocks: llama.cpp falls back to legacy types, as the estimator predicts."""
    spec = load_model_spec(str(tiny_model_factory("qwen3")))
    expected = {gguf_name(t.name): tensor_type(t, quant, spec) for t in spec.tensors()}
    assert _types_in_file(tiny_gguf_factory("qwen3", quant)) == expected


def test_unknown_quant_is_refused(tiny_llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Q3_X"):
        _export(tiny_llama_dir, tmp_path, "Q3_X")


def test_imatrix_only_types_are_refused_up_front_when_no_matrix_is_made(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """Without calibration text the matrix comes from generated text (tests/exporters/test_self_calibration.py);
    with that turned off too there is none, and a type that needs one is refused before any work."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    with pytest.raises(ConfigError, match="importance matrix"):
        GGUFExporter().export(tiny_llama_dir, tmp_path, "IQ2_XXS", {"self_calibration": False})
    assert not (tmp_path / "model.gguf").exists()


def test_quantized_model_loads_and_generates(tiny_gguf_factory) -> None:
    from llama_cpp import Llama

    llm = Llama(model_path=str(tiny_gguf_factory("llama-gqa", "Q8_0")), n_ctx=128, n_threads=2, verbose=False)
    try:
        text = llm("def main", max_tokens=5, temperature=0.0)["choices"][0]["text"]
        assert isinstance(text, str) and llm.n_vocab() == 512
    finally:
        llm.close()
