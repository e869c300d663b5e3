"""--kv-type at serve time: sizing in the chosen type (q8_0 ~1.9x the sequences of f16 in the same memory),
the runtime built with it, the manifest's type as the default, and a precise refusal for ONNX/torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.backends import backend
from edgeopt.store.bundle import load_bundle
from edgeopt.errors import ConfigError
from edgeopt.optimize.pipeline import OptimizeOptions, resolve
from edgeopt.server.startup.launcher import (
    ServeOptions,
    load_served_model,
    serve_bundle,
    serving_shape,
)
from edgeopt.sizing.budget import DEFAULT_MAX_SEQUENCES, SAFETY_MARGIN
from edgeopt.sizing.bundle_facts import bundle_kv_facts
from edgeopt.sizing.shape import with_draft_rows
from tests.fixtures.demo_gguf import optimize_demo_gguf

F16_BYTES_PER_TOKEN = 2 * 4 * 2 * 64 * 2  # K and V x 4 layers x 2 KV heads x head_dim 64 x 2 bytes


@pytest.fixture(scope="module")
def q8_bundle(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return optimize_demo_gguf(demo_model_dir, tmp_path_factory.mktemp("kv-serve") / "demo-q8kv", "q8_0")


def memory_for_f16_sequences(bundle: Path, sequences: float, context: int,
                             asked_sequences: int = DEFAULT_MAX_SEQUENCES) -> int:
    """Memory in which an f16 cache holds ``sequences`` full contexts beside the weights and the runtime's
    overhead for ``asked_sequences`` (--max-concurrency; the server's default when not given), with the logits
    rows serve's default speculation reserves."""
    facts = with_draft_rows(backend("gguf"), bundle_kv_facts(bundle, load_bundle(bundle)),
                            ServeOptions().shape_request().draft_rows)
    kv = int(sequences * context * F16_BYTES_PER_TOKEN)
    return int((facts.weights_bytes + facts.overhead_bytes(asked_sequences) + kv) / (1 - SAFETY_MARGIN))


@pytest.mark.parametrize("context", [256, 2048])
def test_q8_0_serves_about_1_9x_the_sequences_of_f16_in_the_same_memory(q8_bundle: Path, context: int):
    manifest = load_bundle(q8_bundle)
    assert manifest.kv.kv_type == "q8_0"
    memory = memory_for_f16_sequences(q8_bundle, 8.2, context)
    f16 = serving_shape(q8_bundle, manifest, ServeOptions(memory_bytes=memory, context=context, kv_type="f16")).sizing
    q8 = serving_shape(q8_bundle, manifest, ServeOptions(memory_bytes=memory, context=context)).sizing  # the manifest's
    assert (f16.kv_bytes_per_token, q8.kv_bytes_per_token) == (2048, 1088)
    full_contexts = {name: s.kv_capacity_tokens // s.context_length for name, s in (("f16", f16), ("q8_0", q8))}
    assert full_contexts == {"f16": 8, "q8_0": 15}  # 8.2 x 2 / (34 / 32) = 15.4
    if context == 256:  # short contexts: the sequences the engine admits are what the cache affords
        assert (f16.max_sequences, q8.max_sequences) == (8, 15)


def test_the_runtime_is_built_with_the_served_kv_type(q8_bundle: Path):
    manifest = load_bundle(q8_bundle)
    options = ServeOptions(memory_bytes=memory_for_f16_sequences(q8_bundle, 8.2, 256), context=256, threads=1)
    shape = serving_shape(q8_bundle, manifest, options)
    sizing = shape.sizing
    served = load_served_model(q8_bundle, manifest, shape, options)
    try:
        assert served.runtime.kv_type == "q8_0"
        assert served.runtime.info.max_slots == sizing.max_sequences == 15
        assert served.runtime.info.kv_capacity_tokens == sizing.kv_capacity_tokens == 15 * 256
    finally:
        served.engine.shutdown()


def test_serve_refuses_kv_type_for_an_onnx_bundle_before_loading(onnx_fp32_bundle: Path):
    with pytest.raises(ConfigError) as err:
        serve_bundle(onnx_fp32_bundle, ServeOptions(kv_type="q8_0", port=0))
    assert "--kv-type q8_0 applies to gguf bundles only" in err.value.message
    assert "onnx bundles run on onnxruntime" in err.value.message


def test_optimize_refuses_kv_type_for_torch_before_any_work(tiny_llama_dir: Path, tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        resolve(OptimizeOptions(model=str(tiny_llama_dir), format="torch", kv_type="q4_0", output=tmp_path / "x"))
    assert "torch bundle" in err.value.message and "--format gguf" in err.value.hint


def test_eval_measures_the_kv_type_serve_would_override_with(q8_bundle: Path, demo_model_dir: Path):
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    result = CliRunner().invoke(app, ["eval", str(q8_bundle), "--data", str(demo_model_dir / "eval.txt"),
                                      "--no-original", "--max-tokens", "256", "--kv-type", "q4_0", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output[result.output.index("{"):])
    assert metrics["kv_cache_type"] == "q4_0" and 0 < metrics["kv_cache_kl_divergence"] < 5e-3, metrics
