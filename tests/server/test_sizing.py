"""Serve-time KV sizing: the few numbers it needs come from the manifest (or the bundle's config.json),
never from parsing the model file's vocabulary in Python, and a default context clamps to the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import llama_cpp
import pytest

from edgeopt.store.bundle import load_bundle, write_manifest
from edgeopt.errors import ConfigError
from edgeopt.server.startup.serve_process import launched_server
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
from edgeopt.sizing.budget import kv_bytes_per_token
from edgeopt.sizing.bundle_facts import kv_shape
from tests.server.gguf_bundle import make_gguf_bundle

ONE_GIB = ServeOptions(memory_bytes=2**30, max_concurrency=2)


def _refuse_to_parse(*_args, **_kwargs):
    raise AssertionError("the serving path parsed the GGUF file in Python (gguf.GGUFReader)")


def test_a_151k_vocabulary_gguf_is_sized_from_the_manifest_and_loaded_once(big_vocab_gguf_bundle: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    import gguf

    monkeypatch.setattr(gguf, "GGUFReader", _refuse_to_parse)  # 13 s on this vocabulary, in Python
    loads: list[bytes] = []
    real_load = llama_cpp.llama_model_load_from_file
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", lambda path, params: loads.append(path) or
                        real_load(path, params))
    manifest = load_bundle(big_vocab_gguf_bundle)
    shape = serving_shape(big_vocab_gguf_bundle, manifest, ONE_GIB)
    sizing = shape.sizing
    served = load_served_model(big_vocab_gguf_bundle, manifest, shape, ONE_GIB)
    try:
        assert len(loads) == 1, f"llama.cpp loaded the model {len(loads)} times"
        facts = served.runtime.facts  # what llama.cpp itself read from the file: the reference
        assert served.runtime.info.vocab_size == 151_646
        assert sizing.kv_bytes_per_token == kv_bytes_per_token(facts.kv_elements_per_token, 2)  # f16 KV
        assert sizing.context_length == facts.context_train == 2048  # the model's window, not 4096
    finally:
        served.engine.shutdown()


def test_a_bundle_without_recorded_kv_facts_is_sized_from_its_config_json(tiny_gguf_factory, tiny_model_factory,
                                                                          tmp_path: Path):
    """Bundles written before the manifest recorded kv_bytes_per_token agree with llama.cpp's own reading."""
    from edgeopt.runtimes.llama_cpp.model import load_model, model_facts

    gguf_path = tiny_gguf_factory("qwen3", "F16")  # explicit head_dim (16) != hidden / heads
    bundle = make_gguf_bundle(gguf_path, tiny_model_factory("qwen3"), tmp_path / "old")
    manifest = load_bundle(bundle)
    assert manifest.kv is None and "kv_bytes_per_token" not in manifest.export
    model = load_model(gguf_path, 0)
    try:
        facts = model_facts(model, gguf_path)
    finally:
        llama_cpp.llama_model_free(model)
    assert kv_shape(bundle, manifest) == (kv_bytes_per_token(facts.kv_elements_per_token, 2), facts.context_train)


def test_an_onnx_bundle_serves_with_the_models_window_when_no_context_is_given(onnx_fp32_bundle: Path):
    """The tiny model has a 512-token window: the default (4096) must clamp to it, as it does for GGUF."""
    manifest = load_bundle(onnx_fp32_bundle)
    assert manifest.kv.context_length == 512
    shape = serving_shape(onnx_fp32_bundle, manifest, ONE_GIB)
    sizing = shape.sizing
    assert sizing.context_length == 512
    served = load_served_model(onnx_fp32_bundle, manifest, shape, ONE_GIB)
    try:
        assert served.context_length == 512
    finally:
        served.engine.shutdown()


def test_an_older_onnx_manifest_takes_the_window_from_the_models_config(onnx_fp32_bundle: Path, tmp_path: Path):
    bundle = tmp_path / "older"
    shutil.copytree(onnx_fp32_bundle, bundle)
    manifest = load_bundle(bundle)
    manifest.kv = None  # written before the typed kv section: the exporter's own KV count, no context
    assert "context_length" not in manifest.export
    write_manifest(bundle, manifest)
    assert kv_shape(bundle, load_bundle(bundle)) == (manifest.export["kv_bytes_per_token"], 512)


def test_an_explicit_context_beyond_the_model_names_both_numbers_and_the_fix(onnx_fp32_bundle: Path):
    manifest = load_bundle(onnx_fp32_bundle)
    with pytest.raises(ConfigError, match="--context 1024 .* 512") as info:
        serving_shape(onnx_fp32_bundle, manifest, ServeOptions(memory_bytes=2**30, context=1024))
    assert "--context 512" in info.value.hint


def test_edgeopt_serve_of_an_onnx_bundle_without_context_reports_the_models_window(onnx_fp32_bundle: Path):
    import httpx

    with launched_server(onnx_fp32_bundle, threads=1, extra_args=["--memory", "1GiB"],
                         startup_timeout_s=120) as server:
        models = httpx.get(server.base_url + "/v1/models", timeout=10).json()["data"]
    assert models[0]["max_model_len"] == 512, json.dumps(models)
