"""The planner's ONNX size estimate is within 5% of the files the exporter really writes."""

from __future__ import annotations

import pytest

from edgeopt.sources.model_spec import load_model_spec
from edgeopt.exporters.onnx.quant_types import estimate_onnx_bytes
from tests.fixtures.onnx_bundles import optimize_onnx
from tests.fixtures.tiny_models import build_tiny_model


@pytest.fixture(scope="module")
def mid_models(tmp_path_factory, tiny_tokenizer_dir):
    """Big enough (about 3.4M parameters) that weights, not the graph, dominate, as in real models."""
    root = tmp_path_factory.mktemp("mid")
    return {v: build_tiny_model(root / v, v, tiny_tokenizer_dir, hidden_size=256, num_layers=4,
                                intermediate_size=768) for v in ("llama-gqa", "llama-tied")}


@pytest.mark.parametrize("variant", ["llama-gqa", "llama-tied"])
@pytest.mark.parametrize("quant", ["fp32", "int8", "int4"])
def test_estimate_within_five_percent(variant, quant, mid_models, tmp_path):
    bundle = optimize_onnx(mid_models[variant], tmp_path / "b", quant)
    real = sum(p.stat().st_size for p in (bundle / "model").iterdir() if p.name.startswith("model.onnx"))
    predicted = estimate_onnx_bytes(load_model_spec(str(mid_models[variant])), quant)
    assert abs(predicted / real - 1) <= 0.05, f"{variant} {quant}: predicted {predicted}, real {real}"
