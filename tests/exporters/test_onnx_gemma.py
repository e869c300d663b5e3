"""Gemma to ONNX (optimum-onnx supports gemma2 and gemma3_text): soft-caps kept, tied embedding stored once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgeopt.sources.model_spec import load_model_spec
from tests.fixtures.onnx_bundles import optimize_onnx


def _vocab_sized_initializers(bundle: Path, vocab: int, hidden: int) -> list[str]:
    import onnx

    graph = onnx.load(str(bundle / "model" / "model.onnx")).graph
    return [init.name for init in graph.initializer if sorted(init.dims) == sorted((vocab, hidden))]


def test_gemma3_tied_embedding_is_stored_once(tiny_gemma_factory, tmp_path: Path) -> None:
    """optimum skips deduplication for Gemma 3's scaled embedding module; the export must not."""
    model_dir = tiny_gemma_factory("gemma3")
    spec = load_model_spec(str(model_dir))
    bundle = optimize_onnx(model_dir, tmp_path / "b", "fp32")
    assert _vocab_sized_initializers(bundle, spec.vocab_size, spec.hidden_size) == ["model.embed_tokens.weight"]
    export = json.loads((bundle / "manifest.json").read_text())["export"]
    assert export["fp32_kl_vs_torch"] <= 1e-5 and export["fp32_top1_vs_torch"] == 1.0


def test_gemma2_export_keeps_attention_soft_capping(tiny_gemma_factory, tmp_path: Path) -> None:
    """optimum loads with SDPA, which drops the cap; the export traces eager attention (validated vs eager)."""
    bundle = optimize_onnx(tiny_gemma_factory("gemma2"), tmp_path / "b", "fp32")
    export = json.loads((bundle / "manifest.json").read_text())["export"]
    assert export["fp32_kl_vs_torch"] <= 1e-5
    # KV layout read from the graph: the model's 2 KV heads of head_dim 48, not hidden / heads = 32.
    assert (export["kv_heads"], export["head_dim"], export["num_layers"]) == (2, 48, 4)


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_gemma3_quantized_onnx_runs(quant: str, tiny_gemma_factory, tmp_path: Path) -> None:
    from edgeopt.exporters.onnx.scorer import OnnxScorer
    from tests.fixtures.parity import parity_ids

    model_dir = tiny_gemma_factory("gemma3")
    bundle = optimize_onnx(model_dir, tmp_path / "b", quant)
    manifest = json.loads((bundle / "manifest.json").read_text())
    scorer = OnnxScorer(bundle / manifest["model_file"], context=128)
    logits = scorer.score(parity_ids(model_dir, 64))
    scorer.close()
    assert logits.shape[0] == 64 and np.isfinite(logits).all()
    assert manifest["export"]["probe_top1_vs_fp32"] >= 0.8
    import onnx

    # the tied table in 8-bit blocks, read by the embedding lookup and the output layer alike (one copy)
    spec = load_model_spec(str(model_dir))
    graph = onnx.load(str(bundle / manifest["model_file"])).graph
    [lookup] = [n for n in graph.node if n.op_type == "GatherBlockQuantized"]
    [head] = [n for n in graph.node if n.op_type == "MatMulNBits" and n.input[1] == lookup.input[0]]
    assert manifest["export"]["quantization"]["embedding"]["tied_output"] in head.name
    assert _vocab_sized_initializers(bundle, spec.vocab_size, spec.hidden_size) == []  # no fp32 table left
