"""Granite's four multipliers reach llama.cpp's granite metadata, and each one is honoured: a model
where only that multiplier differs from its neutral value still matches transformers (KL <= 1e-5);
dropping the key would leave llama.cpp at 1.0 (or 1/sqrt(head_dim) for the attention scale)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.architectures.catalog import build_architecture, by_name
from tests.fixtures.parity import gguf_parity

# Neutral values: what transformers' Granite does without the multiplier (attention: plain 1/sqrt(d)).
NEUTRAL = {"embedding_multiplier": 1.0, "residual_multiplier": 1.0, "attention_multiplier": 1 / 32 ** 0.5,
           "logits_scaling": 1.0}
KEYS = {"embedding_multiplier": "granite.embedding_scale", "residual_multiplier": "granite.residual_scale",
        "attention_multiplier": "granite.attention.scale", "logits_scaling": "granite.logit_scale"}


def test_multipliers_are_written_under_llama_cpp_keys(arch_dir, arch_gguf) -> None:
    import gguf

    fields = {n: f.contents() for n, f in gguf.GGUFReader(arch_gguf("granite3", "F32")).fields.items()}
    config = by_name("granite3").config
    assert fields["general.architecture"] == "granite"
    for hf_key, gguf_key in KEYS.items():
        assert fields[gguf_key] == pytest.approx(config[hf_key]), gguf_key


@pytest.mark.parametrize("multiplier", list(KEYS))
def test_each_multiplier_is_honoured(multiplier: str, tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    base = by_name("granite3")
    config = {**base.config, **NEUTRAL, multiplier: base.config[multiplier]}
    model = build_architecture(dataclasses.replace(base, config=config), tmp_path / "hf", tiny_tokenizer_dir)
    result = GGUFExporter().export(model, tmp_path / "out", "F32", {})
    comparison = gguf_parity(model, tmp_path / "out" / result.model_file)
    assert comparison.mean_kl <= 1e-5, f"{multiplier}: mean KL {comparison.mean_kl:.3g}"
    assert comparison.top1_agreement == 1.0
