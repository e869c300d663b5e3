"""End to end through the CLI: optimize --prune --distil-data writes a bundle whose manifest records both passes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from edgeopt.cli.app import app


def test_optimize_prunes_distils_and_records_metrics(tiny_model_factory, corpus_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    args = ["optimize", str(tiny_model_factory("qwen2")), "--format", "gguf", "--quant", "F16", "-o", str(out),
            "--prune", "0.3", "--distil-data", str(corpus_file), "--distil-steps", "3", "--no-eval"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    manifest = json.loads((out / "manifest.json").read_text())
    prune, distil = manifest["passes"]
    assert (prune["name"], distil["name"]) == ("prune", "distil")
    assert prune["metrics"]["non_embedding_params_after"] < prune["metrics"]["non_embedding_params_before"]
    assert prune["metrics"]["importance"] == "activation"
    assert {"perplexity", "kl_to_original", "before_kl_to_original", "tokens_per_s"} <= set(distil["metrics"])
    assert distil["params"]["data_sha256"] == prune["params"]["calib_sha256"]
    assert (out / "model.gguf").is_file()
    # Same command again: both passes come from the cache, nothing is retrained.
    again = CliRunner().invoke(app, args + ["--force"])
    assert again.exit_code == 0 and again.output.count("reused cached output") >= 2
