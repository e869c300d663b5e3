"""Phi-3's quirks survive GGUF export: fused projections, LongRoPE (both factor sets and the
attention factor), partial rotary (Phi-4-mini), and what llama.cpp's phi3 graph cannot take is refused."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeopt.errors import ExportError
from tests.architectures.catalog import _PHI_ORIGINAL, by_name
from tests.fixtures.parity import gguf_parity


def _fields(path: Path) -> tuple[dict, dict]:
    import gguf

    reader = gguf.GGUFReader(path)
    return ({name: f.contents() for name, f in reader.fields.items()},
            {t.name: t for t in reader.tensors})


def test_fused_projections_and_longrope_travel_as_llama_cpp_reads_them(arch_dir, arch_gguf) -> None:
    config = json.loads((arch_dir("phi4-mini") / "config.json").read_text())
    fields, tensors = _fields(arch_gguf("phi4-mini", "F32"))
    hidden, head_dim, kv = config["hidden_size"], config["hidden_size"] // 4, 2
    assert fields["general.architecture"] == "phi3"
    # q/k/v stay one attn_qkv (q rows, k rows, v rows) and gate/up one ffn_up of twice the MLP width.
    assert list(tensors["blk.0.attn_qkv.weight"].shape) == [hidden, hidden + 2 * kv * head_dim]
    assert list(tensors["blk.0.ffn_up.weight"].shape) == [hidden, 2 * config["intermediate_size"]]
    assert not any(".attn_q." in n or ".ffn_gate." in n for n in tensors)
    # Partial rotary 0.75: 24 of 32 dimensions rotate, and the factor lists have one entry per pair.
    assert fields["phi3.rope.dimension_count"] == int(head_dim * 0.75) == 24
    scaling = config["rope_scaling"]
    np.testing.assert_array_equal(tensors["rope_factors_long.weight"].data, np.float32(scaling["long_factor"]))
    np.testing.assert_array_equal(tensors["rope_factors_short.weight"].data, np.float32(scaling["short_factor"]))
    scale = config["max_position_embeddings"] / _PHI_ORIGINAL
    assert fields["phi3.rope.scaling.attn_factor"] == pytest.approx(
        math.sqrt(1 + math.log(scale) / math.log(_PHI_ORIGINAL)))
    assert fields["phi3.rope.scaling.original_context_length"] == _PHI_ORIGINAL
    assert fields["phi3.attention.sliding_window"] == config["sliding_window"]


@pytest.mark.parametrize("name", ["phi3.5", "phi4-mini"])
def test_short_factors_inside_the_original_window(name: str, arch_dir, arch_gguf) -> None:
    """Within the original window (256) both use short_factor: transformers because the sequence is
    short, llama.cpp because its context is; the long regime is the matrix's 300 tokens in 512 cells."""
    comparison = gguf_parity(arch_dir(name), arch_gguf(name, "F32"), tokens=200, context=_PHI_ORIGINAL)
    assert comparison.mean_kl <= 1e-5 and comparison.top1_agreement == 1.0, comparison.mean_kl


def test_factor_lists_of_the_wrong_length_are_refused(arch_dir, tmp_path: Path) -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    model = shutil.copytree(arch_dir("phi4-mini"), tmp_path / "phi")
    config = json.loads((model / "config.json").read_text())
    config["rope_scaling"]["long_factor"] = config["rope_scaling"]["long_factor"] + [1.0]
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"long_factor has 13 entries.*need 12"):
        GGUFExporter().export(model, tmp_path / "out", "F32", {})
    assert not (tmp_path / "out" / "model.gguf").exists()


def test_head_pruned_phi3_is_refused_before_writing(arch_dir, tmp_path: Path) -> None:
    """llama.cpp's phi3 graph needs heads x head_dim == hidden: a checkpoint that breaks it is refused
    with the reason (the prune pass refuses to make one; this guards checkpoints pruned elsewhere)."""
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.exporters.gguf.architectures.phi3 import check

    spec = load_model_spec(str(arch_dir("phi3-mini")))
    with pytest.raises(ExportError, match="llama.cpp's phi3 graph requires them equal"):
        check(dataclasses.replace(spec, num_heads=2), {})


def test_catalog_phi_entries_are_the_real_shapes() -> None:
    """Guard the fixtures themselves: Phi-3.5 is MHA and untied, Phi-4-mini GQA, tied, partial rotary."""
    phi35, phi4 = by_name("phi3.5").config, by_name("phi4-mini").config
    assert phi35["num_attention_heads"] == phi35["num_key_value_heads"] and not phi35["tie_word_embeddings"]
    assert phi4["num_key_value_heads"] < phi4["num_attention_heads"] and phi4["tie_word_embeddings"]
    assert phi4["partial_rotary_factor"] == 0.75 and phi35["rope_scaling"]["type"] == "longrope"


@pytest.mark.parametrize("quant", ["Q4_K_M", "Q3_K_M"])
def test_fused_qkv_gets_llama_cpp_quant_type_and_planned_size(quant: str, tiny_tokenizer_dir, tmp_path: Path) -> None:
    """llama.cpp quantizes attn_qkv by its own rule (Q4_K_M -> Q5_K, Q3_K_M -> Q4_K); the planner must
    assume the same types tensor by tensor, or Phi-3's size estimate drifts."""
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.planning.checkpoint import weight_bytes
    from edgeopt.exporters.gguf.exporter import GGUFExporter
    from edgeopt.exporters.gguf.quant_types import tensor_type
    from edgeopt.exporters.gguf.tensor_names import gguf_name
    from tests.architectures.catalog import build_architecture

    import gguf

    base = by_name("phi3-mini")  # rows of 256 and 512 so k-quants apply without shape fallbacks
    wide = dataclasses.replace(base, config={**base.config, "hidden_size": 256, "intermediate_size": 512,
                                             "num_hidden_layers": 4})
    model = build_architecture(wide, tmp_path / "hf", tiny_tokenizer_dir)
    result = GGUFExporter().export(model, tmp_path / "out", quant, {"threads": 2})
    path = tmp_path / "out" / result.model_file
    spec = load_model_spec(str(model))
    expected = {gguf_name(t.name, "phi3"): tensor_type(t, quant, spec) for t in spec.tensors()}
    assert {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors} == expected
    assert abs(weight_bytes(spec, "gguf", quant) / path.stat().st_size - 1) <= 0.05


@pytest.mark.parametrize("name", ["phi3.5", "phi4-mini"])
def test_onnx_longrope_switches_factors_in_graph(name: str, arch_dir, arch_bundle) -> None:
    """The exported graph chooses short or long factors per step as transformers does: a 200-token
    prefill (short, inside the 256 window) then 100 tokens through the KV cache (long, past it) equal
    transformers' same two calls. A trace that froze one branch fails one of the two (KL ~2)."""
    import torch
    from transformers import AutoModelForCausalLM

    from edgeopt.store.bundle import load_bundle
    from edgeopt.measuring.metrics import Comparison
    from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
    from edgeopt.runtimes.onnxruntime.session import create_session
    from tests.fixtures.parity import parity_ids

    bundle = arch_bundle(name, "onnx", "fp32")
    ids = parity_ids(arch_dir(name))
    model = AutoModelForCausalLM.from_pretrained(str(arch_dir(name))).eval()
    with torch.no_grad():
        first = model(torch.tensor([ids[:200]]), use_cache=True)
        second = model(torch.tensor([ids[200:]]), past_key_values=first.past_key_values)
    decoder = DecoderSession(create_session(bundle / load_bundle(bundle).model_file, 2, ["CPUExecutionProvider"]))
    short, past = decoder.run_sequence(ids[:200])
    long, _ = decoder.run_sequence(ids[200:], past, 200)
    for reference, candidate in ((first.logits[0].numpy(), short), (second.logits[0].numpy(), long)):
        comparison = Comparison()
        comparison.add(reference, candidate)
        assert comparison.mean_kl <= 1e-5 and comparison.top1_agreement == 1.0, comparison.mean_kl
