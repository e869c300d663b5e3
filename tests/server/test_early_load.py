"""The served GGUF starts loading beside the server's imports (edgeopt/server/startup/early_load.py): the runtime
takes that model when it is the same file loaded the same way, and frees it otherwise."""

from __future__ import annotations

import json
import time
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


def test_the_command_line_names_the_model_served_alone(tmp_path: Path) -> None:
    from edgeopt.server.startup.early_load import served_alone

    model = str(tmp_path / "m.gguf")
    assert served_alone(["serve", model, "--port", "8000"]) == Path(model)
    assert served_alone(["--debug", "serve", model]) == Path(model)
    for argv in (["serve", "--port", "8000", model],  # left to serve's own parsing
                 ["serve", model, "--workers", "board:50052"], ["serve", model, "--draft=d.gguf"],
                 ["serve", model, "--model", "b=other.gguf"], ["serve", model, "--help"], ["plan", model], ["serve"]):
        assert served_alone(argv) is None, argv


def test_serve_takes_over_the_load_the_command_line_began_or_frees_it(tiny_gguf_factory, monkeypatch) -> None:
    import llama_cpp

    from edgeopt.server.startup import early_load

    gguf = tiny_gguf_factory("llama-gqa", "F16")
    early_load.start_from_command_line(["serve", str(gguf)])
    begun = early_load._from_command_line[0]
    assert early_load.early_load_for(gguf) is begun and not early_load._from_command_line
    begun.discard()

    freed: list[object] = []
    real_free = llama_cpp.llama_model_free
    monkeypatch.setattr(llama_cpp, "llama_model_free", lambda model: (freed.append(model), real_free(model)))
    early_load.start_from_command_line(["serve", str(gguf)])
    begun = early_load._from_command_line[0]
    assert early_load.early_load_for(None) is None  # serve found it is not served alone (e.g. --workers later on)
    model = begun._result.result(timeout=60)[1]
    deadline = time.monotonic() + 10  # freed by the loading thread once its load ends
    while model not in freed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert model in freed and begun.take(gguf, 0) is None
    begun = early_load.early_load_for(gguf)  # nothing begun: serve begins it itself
    model = begun.take(gguf.resolve(), 0) if isinstance(begun, EarlyLoad) else None
    assert model is not None
    real_free(model)


def test_a_load_beside_python_drops_its_log_and_routes_it_back(tiny_gguf_factory, monkeypatch) -> None:
    """Each llama.cpp log line routed to Python waits for the GIL: a load beside the server's imports drops them."""
    import llama_cpp

    from edgeopt.runtimes.llama_cpp import model as llama_model

    set_to: list[object] = []
    real_set = llama_cpp.llama_log_set
    monkeypatch.setattr(llama_cpp, "llama_log_set", lambda callback, data: (set_to.append(callback),
                                                                            real_set(callback, data)))
    llama_model.init_backend()
    model = llama_model.load_model(tiny_gguf_factory("llama-gqa", "F16"), 0, beside_python=True)
    llama_cpp.llama_model_free(model)
    assert llama_model._DROP_LOG is not None and set_to == [llama_model._DROP_LOG, llama_model._log_to_python]
