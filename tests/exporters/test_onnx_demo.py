"""Quality of ONNX quantization on the trained demo model, measured by the pipeline's own evaluation."""

from __future__ import annotations

import pytest

from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize


def optimize_demo(demo_model_dir, out, quant, **export_options):
    return run_optimize(OptimizeOptions(model=str(demo_model_dir), target="x86-64-cpu", output=out, format="onnx",
                                        quant=quant, context=512, export_options=export_options,
                                        eval_data=demo_model_dir / "eval.txt", force=True),
                        report=lambda _msg: None)


@pytest.mark.parametrize("quant,limit_kl,min_top1", [("fp32", 1e-5, 0.999), ("int8", 5e-3, 0.95),
                                                     ("int4", 0.2, 0.90)])
def test_demo_model_quality(quant, limit_kl, min_top1, demo_model_dir, tmp_path):
    metrics = optimize_demo(demo_model_dir, tmp_path / quant, quant).metrics
    print(f"demo onnx {quant}: {metrics}")
    assert metrics["kl_divergence"] <= limit_kl
    assert metrics["top1_agreement"] >= min_top1
    assert metrics["perplexity"] <= metrics["perplexity_original"] * (1.02 if quant != "int4" else 1.25)
