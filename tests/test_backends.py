"""The backend registry: every entry's module paths resolve, its candidates are quants it knows, and
unknown names are refused with the valid ones."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.exporters import Exporter
from edgeopt.profiles import load_profile


@pytest.mark.parametrize("fmt", backends.formats())
def test_every_entry_names_modules_that_exist_and_quants_it_knows(fmt: str) -> None:
    entry = backends.backend(fmt)
    quants = entry.quants.names
    candidates = entry.quants.candidates + entry.quants.encoder_candidates
    if entry.quants.device_candidates:
        device_candidates = backends.load_attr(entry.quants.device_candidates)
        candidates += tuple(q for name in ("jetson", "x86-64-cpu") for q in device_candidates(load_profile(name)))
    assert candidates and set(candidates) <= set(quants), (fmt, candidates, quants)
    assert callable(backends.load_attr(entry.quants.size_estimate)) and callable(backends.load_attr(entry.export.scorer))
    backends.load_attr(entry.export.exporter_module)
    assert Exporter.registry[fmt]().quants == quants  # the exporter writes what the planner sizes
    assert backends.backend_for_runtime(entry.runtime) == entry
    assert entry.memory.kv_element_bytes > 0 and entry.memory.runtime_overhead_bytes > 0
    for memory_function in (entry.memory.weights_extra, entry.memory.embedding_run):
        assert not memory_function or callable(backends.load_attr(memory_function))


def test_the_exporters_size_tables_cover_exactly_their_formats_quants() -> None:
    """The quant tables (edgeopt/formats/<format>/) list the quants; the exporters' size rules must know each one."""
    from edgeopt.exporters.gguf.quant_types import FILE_TYPES, MIX
    from edgeopt.exporters.onnx.quant_types import ENCODER_GRAPH_BYTES_PER_LAYER, GRAPH_BYTES_PER_LAYER
    from edgeopt.exporters.torch.sizes import DTYPE_BYTES

    assert backends.backend("gguf").quants.names == (*FILE_TYPES, MIX)
    assert set(backends.backend("onnx").quants.names) == set(GRAPH_BYTES_PER_LAYER) == set(ENCODER_GRAPH_BYTES_PER_LAYER)
    assert set(backends.backend("torch").quants.names) == set(DTYPE_BYTES)


def test_an_export_option_has_one_flag_whichever_format_reads_it() -> None:
    flags: dict[str, set[str]] = {}
    for fmt in backends.formats():
        for key, option in backends.backend(fmt).export.options.items():
            flags.setdefault(key, set()).add(option.flag)
            assert option.quants is None or set(option.quants) <= set(backends.backend(fmt).quants.names), (fmt, key)
    assert {key: found for key, found in flags.items() if len(found) > 1} == {}


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
    and ONNX Runtime a prefill chunk's logits (edgeopt.formats.onnx.memory); torch's flat cost covers its own."""
    gguf = backends.backend("gguf")
    small, qwen = gguf.model_overhead_bytes(1000, 512), gguf.model_overhead_bytes(151936, 4864)
    assert small < 110 * 2**20 < qwen  # the 0.5B model needs more than a tiny one, and more than a flat 110 MiB
    assert gguf.logits_bytes_per_sequence(151936) == 4 * 151936 * 4
    onnx = backends.backend("onnx")
    assert onnx.model_overhead_bytes(151936, 4864) == onnx.memory.runtime_overhead_bytes + 151936 * 256 * 4
    torch = backends.backend("torch")
    assert torch.model_overhead_bytes(151936, 4864) == torch.memory.runtime_overhead_bytes
    for entry in (onnx, torch):
        assert entry.logits_bytes_per_sequence(151936) == 0


def test_the_built_in_formats_are_registered_one_line_each_in_one_place() -> None:
    """edgeopt.backends.BUILT_IN lists each built-in entry on a line of its own, imported from its format's package
    (edgeopt/formats/<format>/entry.py), and no other module builds an entry: a format is its package plus that line."""
    root = Path(__file__).resolve().parents[1]
    tree = ast.parse((root / "edgeopt" / "backends.py").read_text())
    built_in = next(node.value for node in tree.body if isinstance(node, ast.AnnAssign)
                    and ast.unparse(node.target) == "BUILT_IN")
    assert isinstance(built_in, ast.Tuple)
    names = [element.id for element in built_in.elts if isinstance(element, ast.Name)]
    assert len(names) == len(built_in.elts) == len({element.lineno for element in built_in.elts})
    imported = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert [imported[name] for name in names] == [f"edgeopt.formats.{entry.format}.entry" for entry in backends.BUILT_IN]
    assert tuple(entry.format for entry in backends.BUILT_IN) == ("gguf", "onnx", "torch")
    builders = sorted(str(path.relative_to(root)) for folder in ("edgeopt", "exporters", "runtimes", "profiles")
                      for path in (root / folder).rglob("*.py") if re.search(r"\bBackend\(", path.read_text()))
    assert builders == [f"edgeopt/formats/{fmt}/entry.py" for fmt in ("gguf", "onnx", "torch")]
