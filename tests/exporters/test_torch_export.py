"""``--format torch``: a safetensors checkpoint bundle that verifies, loads and keeps the model's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.optimize.pipeline import manifest_kv_section
from edgeopt.exporters import get_exporter
from edgeopt.exporters.torch.sizes import torch_candidates
from edgeopt.profiles import load_profile
from edgeopt.runtimes import load_runtime
from edgeopt.runtimes.base import StepInput
from tests.runtimes.torch_bundles import reference_logits


def test_cli_optimize_format_torch_writes_a_bundle_that_loads_and_serves(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["optimize", str(tiny_llama_dir), "--format", "torch", "--no-eval",
                                      "--context", "256", "-o", str(out)])
    assert result.exit_code == 0, result.output
    manifest = load_bundle(out)  # verifies every file's sha256
    assert (manifest.format, manifest.runtime, manifest.model_file) == ("torch", "torch", "model")
    assert manifest.quant == "fp32"  # host has no CUDA: the planner's CPU default
    assert {"model/config.json", "model/model.safetensors", "model/generation_config.json",
            "tokenizer/tokenizer.json"} <= set(manifest.files)
    assert manifest.kv.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # K+V x layers x kv heads x dim x fp32
    rt = load_runtime("torch", out, manifest, threads=2, device="cpu")
    tokens = [5, 17, 99, 42, 7]
    np.testing.assert_allclose(rt.step([StepInput(0, tokens, 0, True)])[0],
                               reference_logits(tiny_llama_dir, tokens)[-1], atol=2e-4)


def test_bf16_export_stores_bf16_tensors_and_half_the_bytes(tiny_model_factory, tmp_path: Path) -> None:
    from safetensors import safe_open

    source = tiny_model_factory("qwen3")
    exporter = get_exporter("torch")
    full = exporter.export(source, tmp_path / "fp32", "fp32", {})
    half = exporter.export(source, tmp_path / "bf16", "bf16", {})
    assert (half.model_file, half.runtime, half.details["dtype"]) == ("model", "torch", "bfloat16")
    with safe_open(str(tmp_path / "bf16" / "model" / "model.safetensors"), "pt") as fh:
        assert {str(fh.get_tensor(name).dtype) for name in fh.keys()} == {"torch.bfloat16"}
    assert half.details["weights_bytes"] < 0.6 * full.details["weights_bytes"]
    spec = load_model_spec(str(source))  # torch keeps its KV cache in the checkpoint's dtype
    assert manifest_kv_section(spec, "torch", "bf16").kv_bytes_per_token * 2 == \
        manifest_kv_section(spec, "torch", "fp32").kv_bytes_per_token


def test_unknown_dtype_is_refused_with_the_valid_ones(tiny_llama_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="'int8'") as info:
        get_exporter("torch").export(tiny_llama_dir, tmp_path, "int8", {})
    assert "bf16" in info.value.hint


def test_cli_refuses_a_torch_quant_the_format_does_not_have(tiny_llama_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["optimize", str(tiny_llama_dir), "--format", "torch", "--quant", "Q4_0",
                                      "--no-eval", "-o", str(tmp_path / "x")])
    assert result.exit_code != 0
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("target, expected", [
    ("jetson-orin-nano-8gb", ("bf16",)),  # sm_87: Ampere, bf16 tensor cores
    ("raspberry-pi-5-8gb", ("fp32", "bf16")),
    ("x86-64-cpu", ("fp32", "bf16")),
])
def test_planner_offers_the_profiles_torch_dtypes(target: str, expected: tuple[str, ...]) -> None:
    assert torch_candidates(load_profile(target)) == expected


def test_optimize_format_torch_evaluates_the_bundle_against_the_original(tiny_llama_dir: Path, tmp_path: Path):
    """The README's GPU path: evaluation is on by default, and `edgeopt eval` re-measures the bundle."""
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["optimize", str(tiny_llama_dir), "--format", "torch", "--quant", "bf16",
                                      "--context", "256", "-o", str(out)])
    assert result.exit_code == 0, result.output
    metrics = load_bundle(out).metrics
    assert metrics["eval_tokens"] > 100
    # bf16 weights: close to the fp32 original, but not bit-identical (an fp32 copy would give KL 0)
    assert 0 < metrics["kl_divergence"] < 0.05 and metrics["top1_agreement"] >= 0.9
    assert metrics["perplexity"] == pytest.approx(metrics["perplexity_original"], rel=0.05)
    again = CliRunner().invoke(app, ["eval", str(out), "--json"])
    assert again.exit_code == 0, again.output
    remeasured = json.loads(again.output)
    assert remeasured["kl_divergence"] == pytest.approx(metrics["kl_divergence"], rel=1e-3)
    assert remeasured["top1_agreement"] == metrics["top1_agreement"]
