"""HF -> GGUF conversion: llama.cpp computes the same function as transformers (F32 logits parity)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgeopt.errors import ExportError, UnsupportedArchitectureError
from edgeopt.measuring.metrics import Comparison
from tests.fixtures.parity import PARITY_TOKENS, gguf_parity
from tests.fixtures.tiny_models import build_tiny_model, widen_init


def _parity(model_dir: Path, gguf_path: Path) -> Comparison:
    return gguf_parity(model_dir, gguf_path)


@pytest.mark.parametrize("variant", ["llama-gqa", "llama-tied", "qwen2", "qwen3"])
def test_f32_logits_match_transformers(variant: str, tiny_model_factory, tiny_gguf_factory) -> None:
    comparison = _parity(tiny_model_factory(variant), tiny_gguf_factory(variant, "F32"))
    assert comparison.positions == PARITY_TOKENS
    assert comparison.mean_kl <= 1e-5, f"{variant}: mean KL {comparison.mean_kl:.3g}"
    assert comparison.top1_agreement == 1.0, f"{variant}: top-1 agreement {comparison.top1_agreement:.4f}"


def test_pruned_shapes_convert_and_match(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    """Fewer heads than hidden/head_dim implies, a narrow MLP and one layer: what structured pruning leaves."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    model_dir = build_tiny_model(tmp_path / "hf", "llama-gqa", tiny_tokenizer_dir, num_layers=1, intermediate_size=96)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 1
    # Re-save with 2 query heads over 1 KV head of width 16 (q_proj 32 x 64): a head-pruned layout.
    import torch
    import transformers

    cfg = transformers.LlamaConfig(**{**config, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16})
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(cfg)
    widen_init(model)
    model.save_pretrained(model_dir, safe_serialization=True)
    result = GGUFExporter().export(model_dir, tmp_path / "out", "F32", {})
    comparison = _parity(model_dir, tmp_path / "out" / result.model_file)
    assert comparison.mean_kl <= 1e-5
    assert comparison.top1_agreement == 1.0


def test_metadata_carries_tokenizer_and_hyperparameters(tiny_model_factory, tiny_gguf_factory) -> None:
    import gguf

    reader = gguf.GGUFReader(tiny_gguf_factory("qwen2", "F16"))
    fields = {name: f.contents() for name, f in reader.fields.items()}
    config = json.loads((tiny_model_factory("qwen2") / "config.json").read_text())
    assert fields["general.architecture"] == "qwen2"
    assert fields["qwen2.attention.head_count"] == 4 and fields["qwen2.attention.head_count_kv"] == 2
    assert fields["qwen2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert fields["tokenizer.ggml.bos_token_id"] == config["bos_token_id"]
    assert fields["tokenizer.ggml.eos_token_id"] == config["eos_token_id"]
    assert "<|im_start|>" in fields["tokenizer.chat_template"]
    names = {t.name for t in reader.tensors}
    assert {"blk.0.attn_q.bias", "blk.1.attn_v.bias", "output.weight"} <= names


def test_llama_cpp_chats_with_the_stored_template(tiny_gguf_factory) -> None:
    """Another GGUF consumer (llama-cpp-python's Llama) formats chat with our template and stops at EOS."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(tiny_gguf_factory("llama-gqa", "F16")), n_ctx=256, n_threads=2, verbose=False)
    try:
        out = llm.create_chat_completion([{"role": "user", "content": "hello"}], max_tokens=8, temperature=0.0)
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
        assert llm.metadata["tokenizer.chat_template"].startswith("{% for message in messages %}")
    finally:
        llm.close()


def test_unsupported_architecture_lists_supported(tmp_path: Path, tiny_model_factory) -> None:
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    model_dir = tmp_path / "gpt2"
    shutil.copytree(tiny_model_factory("llama-gqa"), model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(UnsupportedArchitectureError) as info:
        GGUFExporter().export(model_dir, tmp_path / "out", "F16", {})
    assert "GPT2LMHeadModel" in info.value.message and "Qwen2ForCausalLM" in info.value.hint


def test_unknown_tensor_is_refused(tmp_path: Path, tiny_model_factory) -> None:
    from edgeopt.exporters.gguf.tensor_names import plan_tensors
    from edgeopt.sources.model_spec import load_model_spec

    spec = load_model_spec(str(tiny_model_factory("llama-gqa")))
    names = [t.name for t in spec.tensors()] + ["model.layers.0.mlp.experts.0.weight"]
    with pytest.raises(ExportError, match="experts"):
        plan_tensors(spec, names)


@pytest.mark.parametrize("past_range", [1e6, -1e6])
def test_a_weight_past_f16_range_is_refused_whichever_its_sign(past_range: float):
    """The cast checks the bounds before searching for infinities: a large negative weight under a small maximum
    must be caught as a large positive one is."""
    import numpy as np

    from edgeopt.exporters.gguf.writer import F16OverflowError, _cast

    values = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    values[3, 5] = past_range
    with pytest.raises(F16OverflowError, match="past F16's range"):
        _cast(values, "F16")
    values[3, 5] = 65504.0 if past_range > 0 else -65504.0  # F16's largest value itself is held
    out, _ = _cast(values, "F16")
    assert float(out[3, 5]) == values[3, 5]
