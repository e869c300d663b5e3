"""Embedding-bundle evaluation: the metrics on crafted vectors, evaluate_bundle on real ONNX encoder
bundles against their original checkpoint, bad input, and `edgeopt eval` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import EvaluationError
from edgeopt.measuring.metrics import neighbour_agreement, row_cosines
from edgeopt.evaluation.causal_lm import evaluate_bundle
from edgeopt.evaluation.embeddings import BUILTIN_TEXTS
from tests.fixtures.onnx_bundles import encoder_bundle
from tests.fixtures.tiny_encoder import build_tiny_encoder


def test_row_cosines_and_neighbour_agreement_on_crafted_vectors() -> None:
    a = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    np.testing.assert_allclose(row_cosines(a, 3 * a), 1.0)  # scale does not matter
    np.testing.assert_allclose(row_cosines(a, -a), -1.0)
    assert neighbour_agreement(a, a * 2) == 1.0
    # Rows 1 and 2 swapped: rows 0 and 3 now find a different nearest neighbour, 1 and 2 too.
    swapped = a[[0, 2, 1, 3]]
    assert neighbour_agreement(a, swapped) == 0.0
    with pytest.raises(EvaluationError, match="at least 2"):
        neighbour_agreement(a[:1], a[:1])


def test_fp32_bundle_matches_its_original_on_builtin_texts(encoder_fp32_bundle: Path, tiny_encoder_dir: Path) -> None:
    metrics = evaluate_bundle(encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), tiny_encoder_dir, None)
    assert metrics["eval_texts"] == len(BUILTIN_TEXTS) and metrics["eval_source"].startswith("builtin")
    assert metrics["embedding_cosine_min"] >= 0.9999
    assert metrics["neighbour_agreement"] == 1.0


def test_int8_bundle_on_a_data_file(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    bundle = encoder_bundle(tiny_encoder_dir, tmp_path / "int8", "int8")
    lines = [f"line {i}: the {w} function returns a sorted list of keys" for i, w in
             enumerate(("open", "read", "write", "close", "seek", "flush"))]
    data = tmp_path / "eval.txt"
    data.write_text("\n".join(lines[:3]) + "\n\n   \n" + "\n".join(lines[3:]) + "\n")  # blank lines are skipped
    metrics = evaluate_bundle(bundle, load_bundle(bundle), tiny_encoder_dir, data)
    assert metrics["eval_texts"] == 6 and metrics["eval_source"] == "file:eval.txt"
    assert 0.99 <= metrics["embedding_cosine_min"] <= metrics["embedding_cosine_mean"] <= 1.0 + 1e-6


def test_a_different_original_is_caught(encoder_fp32_bundle: Path, tmp_path: Path) -> None:
    """The metric can fail: the same architecture with other weights is far from the bundle."""
    other = build_tiny_encoder(tmp_path / "other", seed=1)
    metrics = evaluate_bundle(encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), other, None)
    assert metrics["embedding_cosine_mean"] < 0.9


def test_bad_input_is_named(encoder_fp32_bundle: Path, tiny_encoder_dir: Path, tmp_path: Path) -> None:
    manifest = load_bundle(encoder_fp32_bundle)
    one_line = tmp_path / "one.txt"
    one_line.write_text("only one text\n")
    with pytest.raises(EvaluationError, match="one.txt has 1 non-empty line") as exc:
        evaluate_bundle(encoder_fp32_bundle, manifest, tiny_encoder_dir, one_line)
    assert "at least 2 lines" in exc.value.hint
    with pytest.raises(EvaluationError, match="original model") as exc:
        evaluate_bundle(encoder_fp32_bundle, manifest, None, None)
    assert "--no-original" in exc.value.hint


def test_eval_cli_on_an_embedding_bundle(encoder_fp32_bundle: Path, tiny_encoder_dir: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "eval", str(encoder_fp32_bundle), "--original",
                          str(tiny_encoder_dir), "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    metrics = json.loads(run.stdout)
    assert metrics["embedding_cosine_mean"] >= 0.9999 and metrics["neighbour_agreement"] == 1.0


def _lines_around_the_padding(model) -> list[str]:  # noqa: ANN001 - a SentenceTransformer
    """Texts shorter than the tokenizer.json's fixed padding (64) and one between it and max_seq_length."""
    words = "the function returns a sorted list of the keys of the mapping".split()
    long_text = " ".join(words * 6)
    while len(model.tokenizer(long_text)["input_ids"]) > 90:
        long_text = long_text.rsplit(" ", 1)[0]
    return ["open a file in binary mode", "json", "sort a list of keys", long_text]


def test_evaluation_feeds_the_original_as_sentence_transformers_does(encoder_fp32_bundle: Path,
                                                                     tiny_encoder_dir: Path) -> None:
    """Both sides of `edgeopt eval` (and of optimize's quality figure) equal sentence-transformers'
    embeddings: with the tokenizer.json's padding obeyed, both were pooled over 64 tokens of [PAD] and
    agreed with each other while neither matched the model."""
    from sentence_transformers import SentenceTransformer

    from edgeopt.evaluation.embeddings import embedding_pairs

    model = SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    texts = _lines_around_the_padding(model)
    reference, candidate = embedding_pairs(encoder_fp32_bundle, load_bundle(encoder_fp32_bundle),
                                           tiny_encoder_dir, texts, threads=1)
    expected = model.encode(texts)
    assert row_cosines(expected, reference).min() >= 0.9999
    assert row_cosines(expected, candidate).min() >= 0.9999


def test_optimize_quality_figure_matches_sentence_transformers_on_the_served_vectors(tiny_encoder_dir: Path,
                                                                                     tmp_path: Path) -> None:
    """optimize's own embedding_cosine_mean for an INT8 bundle is the cosine a user would measure
    between /v1/embeddings and sentence-transformers (up to dynamic INT8's batch-to-batch noise)."""
    import asyncio

    import httpx
    from sentence_transformers import SentenceTransformer

    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
    from edgeopt.server.app import create_app
    from edgeopt.server.state import ServedModel, ServerSettings
    from edgeopt.runtimes import load_embedding_runtime

    model = SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    texts = _lines_around_the_padding(model)
    data = tmp_path / "eval.txt"
    data.write_text("\n".join(texts) + "\n")
    out = tmp_path / "int8"
    manifest = run_optimize(OptimizeOptions(model=str(tiny_encoder_dir), target="host", output=out, format="onnx",
                                            quant="int8", eval_data=data, force=True), report=lambda _msg: None)
    runtime = load_embedding_runtime("onnxruntime", out, manifest, threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    app = create_app(ServerSettings(model_names=("enc",), kind="embedding"), served=served)

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await client.post("/v1/embeddings", json={"model": "enc", "input": texts})

    resp = asyncio.run(post())
    assert resp.status_code == 200, resp.text
    got = np.array([d["embedding"] for d in resp.json()["data"]], dtype=np.float32)
    measured = float(row_cosines(model.encode(texts), got).mean())
    assert abs(manifest.metrics["embedding_cosine_mean"] - measured) <= 2e-3, (manifest.metrics, measured)
    assert manifest.metrics["embedding_cosine_mean"] >= 0.99
