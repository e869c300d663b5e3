"""Quantization quality on the trained demo model (where near-ties are rare and numbers mean something)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.store.bundle import Manifest
from edgeopt.evaluation.causal_lm import evaluate_bundle

THRESHOLDS = {"Q8_0": ("kl_divergence", 1e-3), "Q4_K_M": ("top1_agreement", 0.90)}


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_K_M"])
def test_demo_model_quality(quant: str, demo_model_dir: Path, tmp_path: Path) -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    result = GGUFExporter().export(demo_model_dir, tmp_path, quant, {"threads": 2})
    manifest = Manifest(source_model=str(demo_model_dir), source_revision="", target="host", format="gguf",
                        quant=quant, runtime="llama_cpp", model_file=result.model_file,
                        tokenizer_dir=str(demo_model_dir))
    metrics = evaluate_bundle(tmp_path, manifest, demo_model_dir, demo_model_dir / "eval.txt", max_tokens=1024)
    print(f"demo {quant}: {metrics}")
    key, bound = THRESHOLDS[quant]
    if key == "kl_divergence":
        assert metrics[key] <= bound, metrics
    else:
        assert metrics[key] >= bound, metrics
