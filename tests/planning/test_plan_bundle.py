"""`edgeopt plan BUNDLE`: the bundle as `edgeopt serve` with the same flags sizes it (GGUF and ONNX bundles,
and embedding bundles, which keep no KV cache); a memory too small is reported, not refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from edgeopt.server.startup.launcher import ServeOptions, serving_shape
from tests.server.gguf_bundle import make_gguf_bundle

runner = CliRunner()


def plan_json(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture(scope="module")
def gguf_bundle(tiny_gguf_factory, tiny_model_factory, tmp_path_factory) -> Path:
    model_dir = tiny_model_factory("llama-gqa")
    return make_gguf_bundle(tiny_gguf_factory("llama-gqa", "F16"), model_dir, tmp_path_factory.mktemp("b") / "gguf")


@pytest.mark.parametrize("which", ["gguf_bundle", "onnx_fp32_bundle"])
@pytest.mark.parametrize("concurrency", [None, 3])
def test_plan_of_a_bundle_is_what_serve_sizes(which: str, concurrency: int | None, request) -> None:
    bundle = request.getfixturevalue(which)
    args = [str(bundle), "--memory", "1GiB", "--context", "256"] + (["-n", str(concurrency)] if concurrency else [])
    plan = plan_json(*args)
    shape = serving_shape(bundle, load_bundle(bundle),
                          ServeOptions(memory_bytes=1 << 30, context=256, max_concurrency=concurrency))
    [candidate] = plan["candidates"]
    assert plan["recommended"] == candidate["format"] + ":" + candidate["quant"] and candidate["fits"]
    assert candidate["format"] == load_bundle(bundle).format
    assert plan["concurrency"] == shape.max_sequences == (concurrency or shape.max_sequences)
    assert plan["context"] == shape.context_length == 256
    assert plan["usable_memory_bytes"] == shape.sizing.usable_memory_bytes == 1 << 30
    assert candidate["kv_bytes_per_token"] == shape.sizing.kv_bytes_per_token > 0
    assert candidate["kv_token_capacity"] == shape.sizing.kv_fit_tokens
    assert (candidate["kv_type"], candidate["kv_layout"]) == (shape.kv_type, shape.kv_layout)
    assert candidate["weight_bytes"] == shape.sizing.weights_bytes
    assert candidate["overhead_bytes"] == shape.sizing.overhead_bytes


def test_a_bundle_that_does_not_fit_is_reported_where_serve_would_refuse(gguf_bundle: Path) -> None:
    plan = plan_json(str(gguf_bundle), "--memory", "8MiB", "-n", "2", "--context", "256")
    assert plan["recommended"] is None and not plan["candidates"][0]["fits"]
    table = runner.invoke(app, ["plan", str(gguf_bundle), "--memory", "8MiB", "-n", "2", "--context", "256"])
    assert table.exit_code == 0 and "nothing fits" in table.output


def test_an_embedding_bundle_is_planned_without_a_kv_cache(encoder_fp32_bundle: Path) -> None:
    plan = plan_json(str(encoder_fp32_bundle), "--memory", "1GiB")
    [candidate] = plan["candidates"]
    assert candidate["fits"] and candidate["kv_bytes_per_token"] == 0 and candidate["kv_token_capacity"] == 0
    assert candidate["weight_bytes"] > 0 and candidate["overhead_bytes"] > 0


def test_plan_bundle_refuses_what_serve_refuses(onnx_fp32_bundle: Path, gguf_bundle: Path) -> None:
    kv_on_onnx = runner.invoke(app, ["plan", str(onnx_fp32_bundle), "--kv-type", "q8_0"])
    assert "fixed dtype" in str(kv_on_onnx.exception)
    sized = runner.invoke(app, ["plan", str(gguf_bundle), "--size", "90MiB"])
    assert "already quantized" in str(sized.exception)
