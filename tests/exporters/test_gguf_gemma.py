"""Gemma 2 / Gemma 3 to GGUF: llama.cpp computes what transformers computes, with every quirk on.

The fixture (tests/fixtures/tiny_gemma.py) makes each quirk bite; ``test_each_quirk_changes_the_logits``
shows that a file missing any one of them is measurably wrong, so the parity test covers them all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeopt.demo.corpus import stdlib_text
from edgeopt.errors import ExportError
from edgeopt.measuring.metrics import Comparison
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.exporters.gguf.scorer import GGUFScorer

PARITY_TOKENS = 300  # > 18 windows of 16 tokens
F32_KL_LIMIT = 1e-5
BROKEN_KL = 1e-3  # every ablation below measures >= 4e-3


def _ids(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model_dir)).encode(stdlib_text(5000)[1000:], add_special_tokens=False)
    assert len(ids) >= PARITY_TOKENS
    return ids[:PARITY_TOKENS]


_REFERENCE: dict[str, np.ndarray] = {}


def _reference(model_dir: Path) -> np.ndarray:
    """transformers' float32 logits (eager attention where soft-capping needs it), cached per checkpoint."""
    from edgeopt.measuring.scorers import HFScorer

    key = str(model_dir)
    if key not in _REFERENCE:
        scorer = HFScorer(model_dir)
        _REFERENCE[key] = scorer.score(_ids(model_dir))
        scorer.close()
    return _REFERENCE[key]


def _export(model_dir: Path, out: Path, quant: str = "F32") -> Path:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    result = GGUFExporter().export(model_dir, out, quant, {"threads": 2})
    return out / result.model_file


def _compare(reference_dir: Path, gguf: Path) -> Comparison:
    scorer = GGUFScorer(gguf, context=512)
    try:
        comparison = Comparison()
        comparison.add(_reference(reference_dir), scorer.score(_ids(reference_dir)))
    finally:
        scorer.close()
    return comparison


def _variant_copy(src: Path, dst: Path, **config_changes) -> Path:
    """The same weights under a config that differs in ``config_changes``."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **config_changes}))
    return dst


def _fields(gguf: Path) -> dict:
    import gguf as gguf_py

    return {name: field.contents() for name, field in gguf_py.GGUFReader(gguf).fields.items()}


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_f32_logits_match_transformers(variant: str, tiny_gemma_factory, tmp_path: Path) -> None:
    model_dir = tiny_gemma_factory(variant)
    comparison = _compare(model_dir, _export(model_dir, tmp_path))
    assert comparison.positions == PARITY_TOKENS
    assert comparison.mean_kl <= F32_KL_LIMIT, f"{variant}: mean KL {comparison.mean_kl:.3g}"
    assert comparison.top1_agreement == 1.0, f"{variant}: top-1 {comparison.top1_agreement:.4f}"


# (variant, quirk, config.json change that removes it from the exported file only)
ABLATIONS = [
    ("gemma2", "sliding window", {"sliding_window": 4096}),
    ("gemma2", "attention soft-cap", {"attn_logit_softcapping": 1e6}),
    ("gemma2", "final soft-cap", {"final_logit_softcapping": 1e6}),
    ("gemma2", "query_pre_attn_scalar", {"query_pre_attn_scalar": 48}),
    ("gemma3", "sliding window", {"sliding_window": 4096}),
    ("gemma3", "local:global layer pattern",
     {"layer_types": ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 2}),
    ("gemma3", "local rope base", {"rope_local_base_freq": 10000.0}),
    ("gemma3", "global rope scaling", {"rope_scaling": None}),
    ("gemma3", "query_pre_attn_scalar", {"query_pre_attn_scalar": 48}),
]


@pytest.mark.parametrize("variant,quirk,change", ABLATIONS, ids=[f"{v}-{q}" for v, q, _ in ABLATIONS])
def test_each_quirk_changes_the_logits(variant: str, quirk: str, change: dict, tiny_gemma_factory,
                                       tmp_path: Path) -> None:
    """A file exported without this quirk disagrees with transformers: parity above needs it carried."""
    model_dir = tiny_gemma_factory(variant)
    ablated = _variant_copy(model_dir, tmp_path / "ablated", **change)
    comparison = _compare(model_dir, _export(ablated, tmp_path / "out"))
    assert comparison.mean_kl > BROKEN_KL, f"{variant} without {quirk}: KL only {comparison.mean_kl:.3g}"


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_reference_converter_ignores_query_pre_attn_scalar(variant: str, tiny_gemma_factory, tmp_path: Path) -> None:
    """Why the conformance check (tests/architectures/test_conformance.py) sets query_pre_attn_scalar to
    the head size, as every published Gemma has it: where they differ (24 vs 48 here), llama.cpp's own
    converter writes the queries unscaled and its file disagrees with transformers; ours folds the ratio
    into the queries and agrees (test_f32_logits_match_transformers)."""
    from tests.exporters.reference_converter import convert_with_reference

    model_dir = tiny_gemma_factory(variant)
    comparison = _compare(model_dir, convert_with_reference(model_dir, tmp_path / "reference.gguf"))
    assert comparison.mean_kl > BROKEN_KL, f"{variant}: the reference's KL is only {comparison.mean_kl:.3g}"


@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_norms_without_the_plus_one_fold_are_wrong(variant: str, tiny_gemma_factory, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import edgeopt.exporters.gguf.architectures.gemma as arch_gemma

    original = arch_gemma.gemma_transform
    no_fold = dataclasses.replace(arch_gemma.EXTRAS, tensor_transform=lambda name, spec, config: (
        None if name.endswith("norm.weight") else original(name, spec, config)))
    monkeypatch.setattr(arch_gemma, "EXTRAS", no_fold)
    comparison = _compare(tiny_gemma_factory(variant), _export(tiny_gemma_factory(variant), tmp_path))
    assert comparison.mean_kl > BROKEN_KL


def test_stored_norms_are_one_plus_w_and_names_are_llama_cpps(tiny_gemma_factory, tmp_path: Path) -> None:
    import gguf as gguf_py
    from safetensors.numpy import load_file

    model_dir = tiny_gemma_factory("gemma3")
    reader = gguf_py.GGUFReader(_export(model_dir, tmp_path))
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    hf = load_file(str(model_dir / "model.safetensors"))
    for hf_name, gguf_name in (("model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"),
                               ("model.layers.0.post_attention_layernorm.weight", "blk.0.post_attention_norm.weight"),
                               ("model.layers.0.pre_feedforward_layernorm.weight", "blk.0.ffn_norm.weight"),
                               ("model.layers.0.post_feedforward_layernorm.weight", "blk.0.post_ffw_norm.weight"),
                               ("model.layers.0.self_attn.k_norm.weight", "blk.0.attn_k_norm.weight"),
                               ("model.norm.weight", "output_norm.weight")):
        np.testing.assert_allclose(tensors[gguf_name], hf[hf_name] + 1.0, rtol=0, atol=1e-6)
    # query_pre_attn_scalar 24 vs head_dim 48: the q norm carries the ratio of the two scales.
    np.testing.assert_allclose(tensors["blk.0.attn_q_norm.weight"],
                               (hf["model.layers.0.self_attn.q_norm.weight"] + 1.0) * np.sqrt(48 / 24), rtol=1e-6)
    assert "output.weight" not in tensors  # tied: llama.cpp reuses token_embd


def test_metadata_is_what_llama_cpp_reads(tiny_gemma_factory, tmp_path: Path) -> None:
    g2 = _fields(_export(tiny_gemma_factory("gemma2"), tmp_path / "g2"))
    assert g2["general.architecture"] == "gemma2"
    assert g2["gemma2.attn_logit_softcapping"] == pytest.approx(5.0)
    assert g2["gemma2.final_logit_softcapping"] == pytest.approx(3.0)
    assert g2["gemma2.attention.sliding_window"] == 16
    assert (g2["gemma2.attention.key_length"], g2["gemma2.embedding_length"], g2["gemma2.attention.head_count"]) == (48, 128, 4)
    assert "gemma2.attention.sliding_window_pattern" not in g2  # llama.cpp's default (every 2nd global) is right
    assert g2["tokenizer.ggml.model"] == "llama" and g2["tokenizer.ggml.add_space_prefix"] is False
    assert "<start_of_turn>" in g2["tokenizer.chat_template"]
    g3 = _fields(_export(tiny_gemma_factory("gemma3"), tmp_path / "g3"))
    assert g3["general.architecture"] == "gemma3"
    assert g3["gemma3.rope.freq_base"] == pytest.approx(10000.0)
    assert g3["gemma3.rope.freq_base_swa"] == pytest.approx(100.0)
    assert g3["gemma3.rope.scaling.type"] == "linear" and g3["gemma3.rope.scaling.factor"] == pytest.approx(4.0)
    assert "gemma3.attn_logit_softcapping" not in g3 and "gemma3.final_logit_softcapping" not in g3
    # The embedding has 36 rows beyond the tokenizer (as Gemma 3's 262208 vs 262144): unused placeholders.
    assert len(g3["tokenizer.ggml.tokens"]) == load_model_spec(str(tiny_gemma_factory("gemma3"))).vocab_size


def test_non_default_layer_pattern_is_written_and_matches(tiny_gemma_factory, tmp_path: Path) -> None:
    """layer_types that llama.cpp's built-in 5:1 pattern would get wrong travel as a per-layer array."""
    types = ["full_attention", "sliding_attention", "sliding_attention"] * 2
    model_dir = _variant_copy(tiny_gemma_factory("gemma3"), tmp_path / "hf", layer_types=types)
    gguf = _export(model_dir, tmp_path / "out")
    assert list(_fields(gguf)["gemma3.attention.sliding_window_pattern"]) == [t == "sliding_attention" for t in types]
    comparison = _compare(model_dir, gguf)
    assert comparison.mean_kl <= F32_KL_LIMIT and comparison.top1_agreement == 1.0


def test_gemma2_without_soft_caps_is_not_capped(tiny_gemma_factory, tmp_path: Path) -> None:
    """llama.cpp's gemma2 graph always caps; a config with no caps must not get Gemma 2's defaults (50, 30)."""
    model_dir = _variant_copy(tiny_gemma_factory("gemma2"), tmp_path / "hf", attn_logit_softcapping=None,
                              final_logit_softcapping=None)
    comparison = _compare(model_dir, _export(model_dir, tmp_path / "out"))
    assert comparison.mean_kl <= F32_KL_LIMIT and comparison.top1_agreement == 1.0


@pytest.mark.parametrize("variant,change,words", [
    ("gemma3", {"attn_logit_softcapping": 50.0}, ("attn_logit_softcapping=50.0", "no attention soft-capping")),
    ("gemma2", {"tie_word_embeddings": False}, ("untied lm_head",)),
    ("gemma3", {"rope_scaling": None, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}}},
     ("sliding layers",)),
])
def test_what_llama_cpp_cannot_express_is_refused(variant: str, change: dict, words: tuple[str, ...],
                                                  tiny_gemma_factory, tmp_path: Path) -> None:
    model_dir = _variant_copy(tiny_gemma_factory(variant), tmp_path / "hf", **change)
    with pytest.raises(ExportError) as refused:
        _export(model_dir, tmp_path / "out")
    for word in words:
        assert word in refused.value.message
    assert "--format onnx" in refused.value.hint
    assert not (tmp_path / "out" / "model.gguf").exists()


def test_soft_capped_reference_uses_eager_attention(tiny_gemma_factory) -> None:
    """transformers' SDPA path silently skips Gemma 2's attention soft-cap; edgeopt's reference must not."""
    import torch
    from transformers import AutoModelForCausalLM

    from edgeopt.measuring.scorers import HFScorer

    model_dir = tiny_gemma_factory("gemma2")
    ids = _ids(model_dir)[:64]
    scorer = HFScorer(model_dir)
    ours = scorer.score(ids)
    scorer.close()
    with torch.no_grad():
        eager = AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="eager")
        sdpa = AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="sdpa")
        expected = eager(torch.tensor([ids])).logits[0].numpy()
        skipped = sdpa(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    assert np.abs(skipped - expected).max() > 1e-2  # the cap bites in this fixture


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_K_M"])
@pytest.mark.parametrize("variant", ["gemma2", "gemma3"])
def test_quantized_gemma_loads_runs_and_is_sized_as_planned(variant: str, quant: str, tiny_gemma_factory,
                                                            tmp_path: Path) -> None:
    import gguf as gguf_py
    from llama_cpp import Llama

    from edgeopt.planning.checkpoint import weight_bytes
    from edgeopt.exporters.gguf.quant_types import tensor_type
    from edgeopt.exporters.gguf.tensor_names import gguf_name

    model_dir = tiny_gemma_factory(variant)
    spec = load_model_spec(str(model_dir))
    path = _export(model_dir, tmp_path, quant)
    # Every tensor has the type the planner assumed (rows of 128 force llama.cpp's k-quant fallbacks).
    expected = {gguf_name(t.name, spec.arch): tensor_type(t, quant, spec) for t in spec.tensors()}
    assert {t.name: t.tensor_type.name for t in gguf_py.GGUFReader(path).tensors} == expected
    assert abs(weight_bytes(spec, "gguf", quant) / path.stat().st_size - 1) <= 0.05
    comparison = _compare(model_dir, path)
    assert comparison.mean_kl <= (0.02 if quant == "Q8_0" else 0.5), f"{variant} {quant}: KL {comparison.mean_kl:.3g}"
    llm = Llama(model_path=str(path), n_ctx=128, n_threads=2, verbose=False)
    try:
        out = llm.create_chat_completion([{"role": "user", "content": "hello"}], max_tokens=8, temperature=0.0)
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        llm.close()
