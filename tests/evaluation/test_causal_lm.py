"""Evaluation: the metrics themselves, evaluate_bundle on real bundles, and the CLI end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeopt.errors import EvaluationError
from edgeopt.measuring.metrics import Comparison, mean_nll
from edgeopt.evaluation.causal_lm import read_eval_text, row_windows, windows
from edgeopt.measuring.reference_logits import stored_logits


def test_identical_logits_have_zero_kl_and_full_agreement() -> None:
    logits = np.random.default_rng(0).normal(size=(20, 50))
    comparison = Comparison()
    comparison.add(logits, logits.copy())
    assert comparison.mean_kl == pytest.approx(0.0, abs=1e-12)
    assert comparison.top1_agreement == 1.0


def test_kl_and_agreement_match_hand_computed_values() -> None:
    reference = np.log(np.array([[0.6, 0.4], [0.2, 0.8]]))
    candidate = np.log(np.array([[0.9, 0.1], [0.7, 0.3]]))
    comparison = Comparison()
    comparison.add(reference, candidate)
    kl_rows = [0.6 * math.log(0.6 / 0.9) + 0.4 * math.log(0.4 / 0.1),
               0.2 * math.log(0.2 / 0.7) + 0.8 * math.log(0.8 / 0.3)]
    assert comparison.mean_kl == pytest.approx(sum(kl_rows) / 2)
    assert comparison.top1_agreement == 0.5  # row 0 agrees (token 0), row 1 does not


def test_perplexity_of_a_uniform_model_is_the_vocab_size() -> None:
    nll, count = mean_nll(np.zeros((5, 7)), [1, 2, 3, 4, 5])
    assert count == 4 and math.exp(nll) == pytest.approx(7.0)


def test_windows_lead_with_bos_and_respect_limits() -> None:
    chunks = windows(list(range(10, 30)), window=8, max_tokens=16, bos=1)
    assert [c[0] for c in chunks] == [1, 1, 1]
    assert all(len(c) <= 8 for c in chunks)
    assert [t for c in chunks for t in c[1:]] == list(range(10, 26))
    # A trailing single token predicts nothing, so it is not a window.
    assert len(windows(list(range(15)), window=8, max_tokens=15, bos=None)) == 2


def test_written_rows_are_windows_without_their_last_token_within_the_token_limit() -> None:
    rows = [[1, 5, 6, 7, 8], [1, 9, 10], [1, 11, 12, 13], [1, 2]]
    assert row_windows(rows, window=8, max_tokens=100) == [[1, 5, 6, 7], [1, 9], [1, 11, 12]]  # [1, 2] predicts nothing
    assert row_windows(rows, window=8, max_tokens=6) == [[1, 5, 6, 7], [1, 9]]
    with pytest.raises(EvaluationError, match="window of at least 4"):
        row_windows(rows, window=3, max_tokens=100)


def test_stored_logits_grow_window_by_window_and_keep_one_vocabulary(tmp_path: Path) -> None:
    rows = np.arange(24, dtype=np.float32).reshape(6, 4)
    with stored_logits(tmp_path) as stored:
        stored.extend(0, rows[:2])
        stored.extend(1, rows[2:3])
        stored.extend(0, rows[3:4])  # decoding adds a row to every window a step
        stored.append(rows[4:6])
        assert stored.count == 3
        np.testing.assert_array_equal(stored[0], rows[[0, 1, 3]])
        np.testing.assert_array_equal(stored[1], rows[2:3])
        np.testing.assert_array_equal(stored[2], rows[4:6])
        with pytest.raises(IndexError):
            stored.extend(5, rows[:1])  # windows are started in order
        with pytest.raises(EvaluationError, match="columns"):
            stored.extend(1, np.zeros((1, 5), dtype=np.float32))
    assert not any(tmp_path.iterdir())  # removed with the block


def test_bad_eval_data_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match="missing.txt"):
        read_eval_text(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(EvaluationError, match="empty"):
        read_eval_text(empty)
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(EvaluationError, match="not UTF-8"):
        read_eval_text(binary)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeopt.cli.app", *args], capture_output=True, text=True, timeout=600)


def test_optimize_gguf_q8_0_end_to_end_then_eval(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """The CLI converts, quantizes, evaluates and writes a bundle; `edgeopt eval` re-measures it."""
    text = tmp_path / "eval.txt"
    from edgeopt.demo.corpus import stdlib_text

    text.write_text(stdlib_text(3000))
    out = tmp_path / "bundle"
    run = _cli("optimize", str(tiny_llama_dir), "--format", "gguf", "--quant", "Q8_0", "-o", str(out),
               "--eval-data", str(text))
    assert run.returncode == 0, run.stderr + run.stdout
    assert "top1_agreement=" in run.stdout and "kl_divergence=" in run.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "gguf" and manifest["quant"] == "Q8_0" and manifest["model_file"] == "model.gguf"
    metrics = manifest["metrics"]
    assert metrics["eval_source"] == "file:eval.txt" and metrics["eval_tokens"] > 100
    # A random tiny model has many near-ties; the demo model is where quality thresholds are meaningful.
    assert metrics["top1_agreement"] >= 0.9 and 0 <= metrics["kl_divergence"] < 0.05
    again = _cli("eval", str(out), "--data", str(text), "--json")
    assert again.returncode == 0, again.stderr
    remeasured = json.loads(again.stdout)
    assert remeasured["kl_divergence"] == pytest.approx(metrics["kl_divergence"], rel=1e-3)


def test_evaluate_without_data_generates_text_from_the_original(tiny_model_factory, tiny_gguf_factory) -> None:
    from edgeopt.store.bundle import Manifest
    from edgeopt.evaluation.causal_lm import evaluate_bundle

    gguf_path = tiny_gguf_factory("qwen2", "F32")
    model_dir = tiny_model_factory("qwen2")
    manifest = Manifest(source_model=str(model_dir), source_revision="", target="host", format="gguf", quant="F32",
                        runtime="llama_cpp", model_file=gguf_path.name, tokenizer_dir=str(model_dir))
    metrics = evaluate_bundle(gguf_path.parent, manifest, model_dir, None, max_tokens=300)
    assert metrics["eval_source"].startswith("generated")
    assert metrics["top1_agreement"] == 1.0 and metrics["kl_divergence"] <= 1e-5
    assert metrics["perplexity"] == pytest.approx(metrics["perplexity_original"], rel=1e-3)


def test_eval_cli_reports_a_missing_data_file(tiny_llama_dir: Path, tmp_path: Path) -> None:
    run = _cli("eval", str(tmp_path / "nope"), "--data", "x.txt")
    assert run.returncode != 0 and "nope" in run.stderr
