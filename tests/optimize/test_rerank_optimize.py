"""Rerank bundles end to end on the real MiniLM encoder and tokenizer with a random-init head
(tests/fixtures/cross_encoder.py): `edgeopt optimize` writes a "rerank" bundle whose fp32 scores are
sentence-transformers' CrossEncoder.predict within 1e-4, and whose INT8 figures are measured and marked as
those of an untrained head."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from edgeopt.encoders.cross_encoder import load_cross_encoder_config
from edgeopt.errors import BundleError, UnsupportedArchitectureError
from edgeopt.exporters.onnx.quant_types import estimate_onnx_bytes
from edgeopt.sources.architectures import RERANK_KIND
from edgeopt.sources.model_spec import load_model_spec, spec_from_config
from edgeopt.measuring.rerank_set import spearman_correlation
from edgeopt.runtimes import load_rerank_runtime

QUERY = "How do I open a file in binary mode in Python?"
DOCUMENTS = ["Pass mode 'rb' to open() to read a file's raw bytes.", "Python lists are ordered and mutable.",
             "json", "",
             # past the model's 512 tokens: cut as transformers cuts the pair (longest side first)
             "Open the file, read its bytes, close it again, and check the result carefully. " * 60]


def test_fp32_bundle_scores_are_cross_encoder_predict(minilm_cross_encoder_dir: Path, rerank_fp32_bundle: Path):
    reference = CrossEncoder(str(minilm_cross_encoder_dir), device="cpu", local_files_only=True)
    assert len(reference.tokenizer(QUERY, DOCUMENTS[-1])["input_ids"]) > 512
    expected = reference.predict([(QUERY, d) for d in DOCUMENTS])
    manifest = load_bundle(rerank_fp32_bundle)
    runtime = load_rerank_runtime(manifest.runtime, rerank_fp32_bundle, manifest, threads=2)
    assert runtime.info.context_length == 512
    got = runtime.score(QUERY, DOCUMENTS)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    # one at a time too: padding in a batch changes no score
    np.testing.assert_allclose([runtime.score(QUERY, [d])[0] for d in DOCUMENTS], expected, rtol=0, atol=1e-4)
    # the pair's token types reach the graph: the same text as query or as document scores differently
    swapped = runtime.score(DOCUMENTS[0], [QUERY])[0]
    assert abs(swapped - got[0]) > 1e-6


def test_fp32_manifest_is_a_rerank_bundle_that_says_its_head_is_untrained(rerank_fp32_bundle: Path):
    manifest = load_bundle(rerank_fp32_bundle)
    assert manifest.kind == "rerank" and manifest.format == "onnx" and manifest.quant == "fp32"
    assert manifest.architecture == "BertForSequenceClassification" and manifest.kv is None
    config = load_cross_encoder_config(rerank_fp32_bundle / "model")
    assert config.activation == "sigmoid" and config.source.startswith("config_sentence_transformers.json")
    metrics = manifest.metrics
    assert metrics["fp32_max_score_error_vs_torch"] <= 1e-4 and metrics["rerank_max_score_error"] <= 1e-4
    assert metrics["rerank_spearman_mean"] >= 0.99 and metrics["rerank_top1_agreement"] == 1.0
    assert metrics["eval_pairs"] == 32 and metrics["rerank_original_hit_rate"] < 0.75
    assert "not a trained reranker" in metrics["rerank_note"]


def test_int8_bundle_measures_what_quantization_cost(minilm_cross_encoder_dir: Path, tmp_path: Path):
    out = tmp_path / "minilm-rerank-int8"
    result = CliRunner().invoke(app, ["optimize", str(minilm_cross_encoder_dir), "--quant", "int8", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "rerank_spearman_mean" in result.output  # the figures are printed
    manifest = load_bundle(out)
    metrics = manifest.metrics
    assert manifest.kind == "rerank" and manifest.quant == "int8"
    assert manifest.export["quantization"]  # the graph really was quantized
    # against the original, as served: a real but small error (sigmoid scores of an untrained head sit near 0.5)
    assert 0 < metrics["rerank_max_score_error"] < 0.05
    assert -1.0 <= metrics["rerank_spearman_mean"] <= 1.0 and 0.0 <= metrics["rerank_top1_agreement"] <= 1.0
    assert metrics["probe_vs_fp32_max_score_error"] == pytest.approx(metrics["rerank_max_score_error"], abs=1e-4)
    assert "rerank_note" in metrics
    # the layers' weights in 8 bits; the 30522 x 384 token table (47 MB) stays fp32 in dynamic INT8
    fp32_bytes = (minilm_cross_encoder_dir / "model.safetensors").stat().st_size
    assert manifest.export["onnx_bytes"] < 0.7 * fp32_bytes
    predicted = estimate_onnx_bytes(load_model_spec(str(minilm_cross_encoder_dir)), "int8")  # what plan prints
    assert abs(predicted - manifest.export["onnx_bytes"]) <= 0.02 * manifest.export["onnx_bytes"]


def test_spec_of_a_cross_encoder_counts_every_checkpoint_tensor(minilm_cross_encoder_dir: Path):
    from safetensors import safe_open

    spec = load_model_spec(str(minilm_cross_encoder_dir))
    assert spec.kind == RERANK_KIND and spec.is_encoder and spec.kv_bytes_per_token(4) == 0
    with safe_open(str(minilm_cross_encoder_dir / "model.safetensors"), "np") as f:
        on_disk = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert {t.name: t.shape for t in spec.tensors()} == on_disk


@pytest.mark.parametrize("model_type, labels", [("bert", 3), ("roberta", 1)])
def test_classifiers_that_are_not_servable_cross_encoders_are_refused(model_type: str, labels: int):
    config = {"model_type": model_type, "architectures": [f"{model_type.title()}ForSequenceClassification"],
              "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 4, "id2label": {str(i): f"LABEL_{i}" for i in range(labels)}}
    with pytest.raises(UnsupportedArchitectureError) as exc:
        spec_from_config(config, "clf")
    assert f"{labels} label(s)" in str(exc.value) and "num_labels=1" in exc.value.hint


def test_a_bundle_without_its_scoring_file_is_refused(tmp_path: Path):
    with pytest.raises(BundleError) as exc:
        load_cross_encoder_config(tmp_path)
    assert "rerank.json" in str(exc.value)
    (tmp_path / "rerank.json").write_text(json.dumps({"activation": "tanh", "max_length": 512}))
    with pytest.raises(BundleError, match="tanh"):
        load_cross_encoder_config(tmp_path)


def test_spearman_correlation_of_orders():
    assert spearman_correlation(np.array([0.1, 0.5, 0.9]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1.0)
    assert spearman_correlation(np.array([0.1, 0.5, 0.9]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert spearman_correlation(np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])) == \
        pytest.approx(0.9486833, abs=1e-6)  # scipy.stats.spearmanr's value with the tie


def test_plan_of_a_rerank_bundle_sizes_it_as_an_encoder(rerank_fp32_bundle: Path):
    from edgeopt.planning.bundle import plan_bundle
    from edgeopt.profiles import load_profile

    plan = plan_bundle(rerank_fp32_bundle, load_profile("host"))
    (candidate,) = plan.candidates
    assert candidate.kv_bytes_per_token == 0 and candidate.max_concurrency == 0 and candidate.fits
    # the model folder's files: the graph, plus config.json and rerank.json beside it
    assert candidate.weight_bytes == pytest.approx(load_bundle(rerank_fp32_bundle).export["onnx_bytes"], rel=1e-3)


@pytest.mark.parametrize("files, activation", [
    ({"config.json": {"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"}}, "identity"),
    ({"config.json": {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}}, "sigmoid"),
    ({"config.json": {"sbert_ce_default_activation_function": None}}, "sigmoid"),  # v3 default: one label, sigmoid
])
def test_activation_of_every_sentence_transformers_generation(tmp_path: Path, files: dict, activation: str):
    from edgeopt.encoders.cross_encoder import read_cross_encoder_config

    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1000000000000000019884624838656}))
    config = read_cross_encoder_config(tmp_path, position_limit=512)
    assert config.activation == activation and config.max_length == 512  # "no limit" falls back to the positions
    np.testing.assert_allclose(config.scores(np.array([[0.0], [2.0]])),
                               [0.0, 2.0] if activation == "identity" else [0.5, 0.8807971], atol=1e-6)


def test_an_activation_edgeopt_cannot_apply_is_refused_at_export(tmp_path: Path):
    from edgeopt.encoders.cross_encoder import read_cross_encoder_config
    from edgeopt.errors import ConfigError

    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"activation_fn": "torch.nn.Tanh"}))
    with pytest.raises(ConfigError, match="torch.nn.Tanh"):
        read_cross_encoder_config(tmp_path, position_limit=512)
