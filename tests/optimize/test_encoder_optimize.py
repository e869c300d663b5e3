"""Encoders end to end: `edgeopt plan` / `edgeopt optimize` on a tiny BERT write an ONNX embedding bundle
that `edgeopt serve`'s app answers on /v1/embeddings; non-ONNX formats and passes are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from edgeopt.errors import BackendError, UnsupportedArchitectureError
from edgeopt.sources.model_spec import load_model_spec, spec_from_config
from edgeopt.optimize.pipeline import OptimizeOptions, resolve
from edgeopt.planning import Compression
from edgeopt.planning.checkpoint import make_plan
from edgeopt.server.app import create_app
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.exporters.onnx.quant_types import estimate_onnx_bytes
from edgeopt.profiles import load_profile
from edgeopt.runtimes import load_embedding_runtime

runner = CliRunner()


def test_encoder_spec_counts_every_checkpoint_tensor(tiny_encoder_dir: Path):
    from safetensors import safe_open

    spec = load_model_spec(str(tiny_encoder_dir))
    assert spec.kind == "embedding" and spec.kv_bytes_per_token(4) == 0
    with safe_open(str(tiny_encoder_dir / "model.safetensors"), "np") as f:
        on_disk = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    predicted = {t.name: t.shape for t in spec.tensors()}
    assert predicted == on_disk


def test_masked_lm_encoder_has_no_pooler_and_causal_lms_are_unchanged(tiny_llama_dir: Path):
    config = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 100, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
    spec = spec_from_config(config, "mlm")
    assert spec.is_encoder and not any(t.name.startswith("pooler") for t in spec.tensors())
    llama = load_model_spec(str(tiny_llama_dir))
    assert llama.kind == "causal-lm" and llama.kv_bytes_per_token(2) > 0


def test_plan_json_for_an_encoder_offers_onnx_only(tiny_encoder_dir: Path):
    result = runner.invoke(app, ["plan", str(tiny_encoder_dir), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    labels = [c["format"] + ":" + c["quant"] for c in plan["candidates"]]
    assert labels == ["onnx:fp32", "onnx:int8"]
    assert all(c["kv_bytes_per_token"] == 0 and c["fits"] for c in plan["candidates"])
    assert plan["recommended"] in labels


def test_encoder_that_exceeds_memory_does_not_fit(tiny_encoder_dir: Path):
    spec = load_model_spec(str(tiny_encoder_dir))
    # below what ONNX Runtime takes before any weight: the process (120 MiB, edgeopt.formats.onnx.memory) and buffers
    plan = make_plan(spec, load_profile("host"), memory_bytes=100 * 1024**2)
    assert plan.recommended is None and not any(c.fits for c in plan.candidates)


@pytest.mark.parametrize("fmt", ["gguf", "torch"])
def test_non_onnx_format_for_an_encoder_is_a_clear_error(tiny_encoder_dir: Path, fmt: str):
    with pytest.raises(UnsupportedArchitectureError) as exc:
        resolve(OptimizeOptions(model=str(tiny_encoder_dir), format=fmt, dry_run=True))
    assert "BertModel" in str(exc.value) and fmt in str(exc.value) and "--format onnx" in exc.value.hint


def test_pruning_an_encoder_is_refused(tiny_encoder_dir: Path):
    with pytest.raises(UnsupportedArchitectureError) as exc:
        resolve(OptimizeOptions(model=str(tiny_encoder_dir), compression=Compression(prune=0.3), dry_run=True))
    assert "'prune'" in str(exc.value) and "--quant int8" in exc.value.hint


def test_optimize_cli_writes_an_embedding_bundle_that_serves(tiny_encoder_dir: Path, tmp_path: Path):
    out = tmp_path / "bert-int8"
    result = runner.invoke(app, ["optimize", str(tiny_encoder_dir), "--format", "onnx", "--quant", "int8",
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    manifest = load_bundle(out)
    assert manifest.kind == "embedding" and manifest.format == "onnx" and manifest.quant == "int8"
    assert manifest.architecture == "BertModel"
    assert manifest.metrics["fp32_min_cosine_vs_torch"] >= 0.9999
    assert 0.9 <= manifest.metrics["probe_min_cosine_vs_fp32"] <= 1.0 + 1e-6
    # evaluation against the original on the built-in sentence pairs (edgeopt.evaluation.embeddings)
    assert 0.99 <= manifest.metrics["embedding_cosine_mean"] <= 1.0 + 1e-6
    assert manifest.metrics["eval_source"].startswith("builtin")
    assert (out / "model" / "pooling.json").is_file() and (out / "tokenizer" / "tokenizer.json").is_file()
    predicted = estimate_onnx_bytes(load_model_spec(str(tiny_encoder_dir)), "int8")
    assert abs(predicted - manifest.export["onnx_bytes"]) <= 0.05 * manifest.export["onnx_bytes"]

    runtime = load_embedding_runtime("onnxruntime", out, manifest, threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    server = create_app(ServerSettings(model_names=("bert",), kind="embedding"), served=served)
    texts = ["open a file", "sort a list of keys"]
    body = _post_embeddings(server, {"model": "bert", "input": texts})
    vectors = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    assert vectors.shape == (2, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)  # the Normalize module
    np.testing.assert_allclose(vectors, runtime.embed(texts), atol=1e-5)


def _post_embeddings(server, body: dict) -> dict:
    import asyncio

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=server)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/embeddings", json=body)

    resp = asyncio.run(post())
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "mpnet"])
def test_other_encoder_families_plan_optimize_and_match_the_original(model_type: str, tmp_path: Path):
    """RoBERTa and XLM-R (BERT's tensor layout) and MPNet (its own, no token types, a relative-position
    bias) number positions after the padding id."""
    from edgeopt.evaluation.causal_lm import evaluate_bundle
    from tests.fixtures.tiny_encoder import ENCODER_CLASSES, build_tiny_encoder

    model_dir = build_tiny_encoder(tmp_path / model_type, model_type=model_type)
    spec = load_model_spec(str(model_dir))
    assert spec.is_encoder and spec.hf_architecture == ENCODER_CLASSES[model_type][1]
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "np") as f:
        assert {t.name: t.shape for t in spec.tensors()} == {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
    out = tmp_path / "bundle"
    result = runner.invoke(app, ["optimize", str(model_dir), "--format", "onnx", "--quant", "int8", "-o", str(out)])
    assert result.exit_code == 0, result.output
    manifest = load_bundle(out)
    assert manifest.kind == "embedding" and manifest.metrics["fp32_min_cosine_vs_torch"] >= 0.9999
    predicted = estimate_onnx_bytes(spec, "int8")
    assert abs(predicted - manifest.export["onnx_bytes"]) <= 0.05 * manifest.export["onnx_bytes"]
    metrics = evaluate_bundle(out, manifest, model_dir, None)
    assert metrics["embedding_cosine_min"] >= 0.99 and metrics["neighbour_agreement"] >= 0.9
    # Positions start after the padding id 1: 130 position rows hold 128 tokens; sentence-transformers'
    # max_seq_length (96) is the smaller limit and the one served.
    runtime = load_embedding_runtime("onnxruntime", out, manifest, threads=1)
    assert runtime.info.context_length == 96
    assert runtime.embed_ids([[5] * 128, [6] * 3]).shape == (2, 64)
    with pytest.raises(BackendError):  # why the limit is 128: a 129th position has no embedding row
        runtime.embed_ids([[5] * 129])
