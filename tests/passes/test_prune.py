"""The prune pass: pruned checkpoints are standard, smaller, and remove the least important units.

The strongest check is exactness: units that contribute nothing (dead MLP channels, heads whose
output is zero, a layer that is an identity) are exactly the ones importance ranks last, and
removing them leaves the logits unchanged. A slicing bug (wrong rows, wrong head layout, wrong
layer renumbering) breaks that equality.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from edgeopt.passes import PassContext
from edgeopt.passes.prune import PrunePass

IDS = torch.arange(3, 67).reshape(2, 32)


def _logits(model_dir: Path) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _with_dead_units(src: Path, dst: Path, dead_heads: list[int], how: str) -> Path:
    """Copy of ``src`` where MLP channels 0..31 and the given heads of every layer, and all of layer 1, do nothing."""
    model = AutoModelForCausalLM.from_pretrained(src)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.up_proj.weight[:32] = 0.0
            for h in dead_heads:
                rows = slice(h * head_dim, (h + 1) * head_dim)
                if how == "value":  # MHA: head h's value is zero, so its attention output is zero
                    layer.self_attn.v_proj.weight[rows] = 0.0
                else:  # GQA: head h's output projection is zero (magnitude importance sees it)
                    layer.self_attn.o_proj.weight[:, rows] = 0.0
        model.model.layers[1].self_attn.o_proj.weight.zero_()
        model.model.layers[1].mlp.down_proj.weight.zero_()
    shutil.copytree(src, dst)
    model.save_pretrained(dst)
    return dst


def _run(model_dir: Path, out: Path, data: Path | None = None, **params) -> dict:
    out.mkdir()
    ctx = PassContext(original_model_dir=model_dir, target="host", data_file=None)
    return PrunePass(**params, **({"calib_data": str(data)} if data else {}), eval_tokens=1024).run(model_dir, out, ctx)


def test_removing_dead_units_keeps_logits_mha_activation(tiny_model_factory, corpus_file, tmp_path) -> None:
    model_dir = _with_dead_units(tiny_model_factory("llama-tied"), tmp_path / "dead", [1], how="value")
    metrics = _run(model_dir, tmp_path / "out", corpus_file, heads=0.25, mlp=0.25, layers=1)
    assert metrics["importance"] == "activation" and metrics["calibration_tokens"] > 0
    cfg = AutoModelForCausalLM.from_pretrained(tmp_path / "out").config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size) == (1, 3, 3, 96)
    torch.testing.assert_close(_logits(tmp_path / "out"), _logits(model_dir), atol=1e-4, rtol=1e-4)
    assert metrics["kl_to_original"] == pytest.approx(0.0, abs=1e-6)


def test_removing_dead_units_keeps_logits_gqa_magnitude(tiny_model_factory, tmp_path) -> None:
    model_dir = _with_dead_units(tiny_model_factory("llama-gqa"), tmp_path / "dead", [1, 2], how="output")
    metrics = _run(model_dir, tmp_path / "out", heads=0.5, mlp=0.25, layers=1)
    assert metrics["importance"] == "magnitude"
    cfg = AutoModelForCausalLM.from_pretrained(tmp_path / "out").config
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (2, 2)  # one query head per KV group
    torch.testing.assert_close(_logits(tmp_path / "out"), _logits(model_dir), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", ["llama-gqa", "qwen2", "qwen3"])
def test_ratio_prunes_every_variant_to_a_loadable_checkpoint(variant, tiny_model_factory, corpus_file, tmp_path) -> None:
    model_dir = tiny_model_factory(variant)
    metrics = _run(model_dir, tmp_path / "out", corpus_file, ratio=0.3)
    assert 0.2 < metrics["non_embedding_reduction"] < 0.4
    assert metrics["params_after"] < metrics["params_before"]
    assert metrics["kl_to_original"] > 0 and metrics["perplexity"] > 1
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    logits = _logits(tmp_path / "out")
    assert torch.isfinite(logits).all()


def test_sparsity_is_reported_as_shrinking_nothing(tiny_model_factory, tmp_path) -> None:
    metrics = _run(tiny_model_factory("llama-gqa"), tmp_path / "out", mlp=0.25, sparsity=0.5)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    w = model.model.layers[0].mlp.up_proj.weight
    assert (w == 0).float().mean().item() == pytest.approx(0.5, abs=0.02)
    assert "no size or speed gain" in metrics["sparsity_note"]


def test_unknown_parameter_is_refused(tiny_llama_dir, tmp_path) -> None:
    from edgeopt.errors import PassError

    with pytest.raises(PassError, match="ratoi"):
        _run(tiny_llama_dir, tmp_path / "out", ratoi=0.3)
