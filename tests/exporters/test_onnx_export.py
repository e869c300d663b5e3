"""ONNX decoder export: parity with torch, bundle layout, optimum interoperability, scorer hook."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import UnsupportedArchitectureError
from edgeopt.exporters.onnx.export import model_kind
from edgeopt.measuring.metrics import mean_kl
from edgeopt.exporters.onnx.validate import probe_token_ids
from tests.fixtures.onnx_bundles import optimize_onnx


def torch_logits(model_dir, ids):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_fp32_bundle_matches_torch(onnx_fp32_bundle, tiny_llama_dir):
    manifest = load_bundle(onnx_fp32_bundle)
    assert (manifest.format, manifest.quant, manifest.runtime, manifest.kind) == ("onnx", "fp32", "onnxruntime",
                                                                                  "causal-lm")
    assert manifest.model_file == "model/model.onnx"
    assert manifest.export["fp32_kl_vs_torch"] <= 1e-5
    # 2 (K,V) x 2 layers x 2 KV heads x 16 head dim x 4 bytes (fp32 KV), read by the server's sizing.
    assert manifest.export["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 4
    from edgeopt.exporters.onnx.scorer import load_scorer

    scorer = load_scorer(onnx_fp32_bundle, manifest, context=64)
    ids = probe_token_ids(scorer.vocab_size, 40, seed=7)
    assert mean_kl(torch_logits(tiny_llama_dir, ids), scorer.score(ids)) <= 1e-5


@pytest.mark.parametrize("variant", ["qwen3", "qwen2"])
def test_other_architectures_export_within_kl(variant, tiny_model_factory, tmp_path):
    """Tied embeddings + q/k norms (Qwen3) and attention biases (Qwen2); the exporter refuses KL > 1e-5."""
    bundle = optimize_onnx(tiny_model_factory(variant), tmp_path / variant, "fp32")
    assert load_bundle(bundle).export["fp32_kl_vs_torch"] <= 1e-5


def test_bundle_loads_in_optimum_ort_model(onnx_fp32_bundle, tiny_llama_dir):
    """Interoperability: the bundle's model directory is what optimum's ORTModelForCausalLM loads."""
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    model = ORTModelForCausalLM.from_pretrained(onnx_fp32_bundle / "model", use_cache=True, use_io_binding=False)
    ids = probe_token_ids(512, 24, seed=3)
    got = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits
    np.testing.assert_allclose(got[0].numpy(), torch_logits(tiny_llama_dir, ids), atol=1e-3)


def test_evaluation_hook_scores_the_onnx_bundle(onnx_fp32_bundle, tiny_llama_dir):
    from edgeopt.evaluation.causal_lm import evaluate_bundle

    manifest = load_bundle(onnx_fp32_bundle)
    metrics = evaluate_bundle(onnx_fp32_bundle, manifest, tiny_llama_dir, None, window=64, max_tokens=128)
    assert metrics["kl_divergence"] <= 1e-5 and metrics["top1_agreement"] >= 0.99


def test_kind_detection(tiny_llama_dir, tiny_encoder_dir, tmp_path):
    assert model_kind(tiny_llama_dir) == "causal-lm"
    assert model_kind(tiny_encoder_dir) == "embedding"
    (tmp_path / "config.json").write_text('{"architectures": ["T5ForConditionalGeneration"], "model_type": "t5"}')
    with pytest.raises(UnsupportedArchitectureError, match="T5ForConditionalGeneration"):
        model_kind(tmp_path)
