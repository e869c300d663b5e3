"""The served GGUF starts loading beside the server's imports (edgeopt/server/startup/early_load.py): the runtime
takes that model when it is the same file loaded the same way, and frees it otherwise."""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.server.startup.early_load import EarlyLoad, early_model_file, start_early_load


def test_which_file_is_loaded_early(tiny_gguf_factory, tmp_path: Path) -> None:
    gguf = tiny_gguf_factory("llama-gqa", "F16")
    assert early_model_file(gguf) == gguf.resolve()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"runtime": "llama_cpp", "kind": "causal-lm",
                                                      "model_file": "model.gguf"}))
    assert early_model_file(bundle) == (bundle / "model.gguf").resolve()
    for other in ({"runtime": "llama_cpp", "kind": "embedding", "model_file": "m.gguf"},
                  {"runtime": "onnxruntime", "model_file": "model.onnx"}, ["not", "a", "manifest"]):
        (bundle / "manifest.json").write_text(json.dumps(other))
        assert early_model_file(bundle) is None
    (bundle / "manifest.json").write_text("{torn")
    assert early_model_file(bundle) is None and early_model_file(tmp_path / "missing.gguf") is None


def test_the_runtime_takes_the_early_model_once(tiny_gguf_factory) -> None:
    gguf = tiny_gguf_factory("llama-gqa", "F16")
    early = start_early_load(gguf)
    assert isinstance(early, EarlyLoad)
    runtime = load_gguf(gguf, kv_capacity_tokens=256, max_slots=1, max_batch_tokens=64, threads=1, n_gpu_layers=0,
                        early_model=early)
    try:
        assert early._taken and runtime.tokenizer.encode("hello")
        assert early.take(gguf, 0) is None  # handed over once
    finally:
        runtime.close()


def test_a_model_loaded_otherwise_is_freed_and_a_failed_load_falls_back(tiny_gguf_factory, tmp_path: Path) -> None:
    gguf = tiny_gguf_factory("llama-gqa", "F16")
    early = EarlyLoad(gguf.resolve())
    assert early.take(gguf, 99) is None  # other GPU layers: freed, the runtime loads its own
    missing = EarlyLoad(tmp_path / "missing.gguf")
    assert missing.take(tmp_path / "missing.gguf", 0) is None  # the regular load reports the missing file
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    runtime = load_gguf(gguf, kv_capacity_tokens=256, max_slots=1, max_batch_tokens=64, threads=1, n_gpu_layers=0,
                        early_model=EarlyLoad(broken))  # another file: freed or failed, either way loaded anew
    runtime.close()
