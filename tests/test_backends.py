"""The backend registry: every entry's module paths resolve, its candidates are quants it knows, and
unknown names are refused with the valid ones."""

from __future__ import annotations

import pytest

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.exporters import Exporter
from edgeopt.profiles import load_profile


@pytest.mark.parametrize("fmt", backends.formats())
def test_every_entry_names_modules_that_exist_and_quants_it_knows(fmt: str) -> None:
    entry = backends.backend(fmt)
    quants = tuple(backends.load_attr(entry.quants))
    candidates = entry.quant_candidates + entry.encoder_quant_candidates
    if entry.profile_candidates:
        profile_candidates = backends.load_attr(entry.profile_candidates)
        candidates += tuple(q for name in ("jetson", "x86-64-cpu") for q in profile_candidates(load_profile(name)))
    assert candidates and set(candidates) <= set(quants), (fmt, candidates, quants)
    assert callable(backends.load_attr(entry.size_estimate)) and callable(backends.load_attr(entry.scorer))
    backends.load_attr(entry.exporter_module)
    assert Exporter.registry[fmt].quants == quants  # the exporter writes what the planner sizes
    assert backends.backend_for_runtime(entry.runtime) == entry
    assert entry.kv_element_bytes > 0 and entry.runtime_overhead_bytes > 0


def test_unknown_format_and_runtime_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown format 'safetensors'") as info:
        backends.backend("safetensors")
    assert "gguf, onnx, torch" in info.value.hint
    with pytest.raises(ConfigError, match="unknown runtime 'vllm'") as info:
        backends.backend_for_runtime("vllm")
    assert "llama_cpp, onnxruntime, torch" in info.value.hint


def test_built_in_formats_cannot_be_unregistered() -> None:
    with pytest.raises(ConfigError, match="'gguf' is built in"):
        backends.unregister("gguf")
    assert "gguf" in backends.formats()


def test_torch_keeps_its_kv_in_the_checkpoints_dtype() -> None:
    torch = backends.backend("torch")
    assert (torch.kv_element_bytes_for("fp32"), torch.kv_element_bytes_for("bf16")) == (4, 2)


def test_llama_cpp_overhead_grows_with_the_model_and_others_stay_fixed() -> None:
    """A 151k vocabulary and a wide feed-forward cost llama.cpp memory (tables, compute buffer, logits rows),
    and ONNX Runtime a prefill chunk's logits (edgeopt.sizing.onnx_memory); torch's flat cost covers its own."""
    gguf = backends.backend("gguf")
    small, qwen = gguf.model_overhead_bytes(1000, 512), gguf.model_overhead_bytes(151936, 4864)
    assert small < 110 * 2**20 < qwen  # the 0.5B model needs more than a tiny one, and more than a flat 110 MiB
    assert gguf.logits_bytes_per_sequence(151936) == 4 * 151936 * 4
    onnx = backends.backend("onnx")
    assert onnx.model_overhead_bytes(151936, 4864) == onnx.runtime_overhead_bytes + 151936 * 256 * 4
    torch = backends.backend("torch")
    assert torch.model_overhead_bytes(151936, 4864) == torch.runtime_overhead_bytes
    for entry in (onnx, torch):
        assert entry.logits_bytes_per_sequence(151936) == 0
