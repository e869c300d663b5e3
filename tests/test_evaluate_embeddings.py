"""Embedding-bundle evaluation: the metrics on crafted vectors, evaluate_bundle on real ONNX encoder
bundles against their original checkpoint, bad input, and `edgeopt eval` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeopt.bundle import load_bundle
from edgeopt.errors import EvaluationError
from edgeopt.eval_metrics import neighbour_agreement, row_cosines
from edgeopt.evaluate import evaluate_bundle
from edgeopt.evaluate_embeddings import BUILTIN_TEXTS
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
    run = subprocess.run([sys.executable, "-m", "edgeopt.cli", "eval", str(encoder_fp32_bundle), "--original",
                          str(tiny_encoder_dir), "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    metrics = json.loads(run.stdout)
    assert metrics["embedding_cosine_mean"] >= 0.9999 and metrics["neighbour_agreement"] == 1.0
