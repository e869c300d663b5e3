"""Hugging Face tensor names -> GGUF tensor names, and the layout changes some tensors need.

llama.cpp's ``llama`` architecture applies rotary embeddings to *adjacent* pairs of a head's
dimensions, while Hugging Face Llama rotates the first half of a head against the second half.
The rows of q_proj and k_proj are therefore reordered (per head: interleave the two halves) so both
compute the same attention, for every family llama.cpp runs that way (ArchExtras.rope_pairs_interleaved).
Qwen2/Qwen3/Phi-3 run with llama.cpp's NeoX rope, which matches HF's layout, so their weights are
copied as they are. Families with fused or extra tensors name them in their arch module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.sources.architectures import SUPPORTED_ARCHITECTURES
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import extras_for

# Suffix after "model.layers.{i}." -> suffix after "blk.{i}."
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
# Buffers some checkpoints save that carry no weights (recomputed from the config).
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")

Transform = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TensorPlan:
    hf_name: str
    gguf_name: str
    transform: Transform | None = None


def gguf_name(hf_name: str, arch: str = "llama") -> str:
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    match = _LAYER.match(hf_name)
    names = {**_LAYER_NAMES, **extras_for(arch).layer_names}
    if match and match.group(2) in names:
        return f"blk.{match.group(1)}.{names[match.group(2)]}"
    raise ExportError(f"tensor {hf_name!r} has no GGUF equivalent",
                      "the checkpoint has parts edgeopt cannot convert; export it with --format onnx instead")


def rope_pairs_interleaved(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k rows (or biases) per head from HF's half-split layout to adjacent pairs."""
    rows = weight.shape[0]
    head_dim = rows // n_heads
    rest = weight.shape[1:]
    return (weight.reshape(n_heads, 2, head_dim // 2, *rest)
            .swapaxes(1, 2)
            .reshape(weight.shape))


def plan_tensors(spec: ModelSpec, stored_names: list[str], config: dict | None = None) -> list[TensorPlan]:
    """The tensors to write, in the checkpoint's canonical order, with their layout transforms.

    ``config`` (config.json) is what a family's check reads (LongRoPE factors, NoPE layers)."""
    extras = extras_for(spec.arch)
    extras.check(spec, config or {})  # refuse what llama.cpp's graph cannot express, before any file is written
    stored = {n for n in stored_names if not _IGNORED.match(n)}
    expected = [t.name for t in spec.tensors()]
    missing = [n for n in expected if n not in stored]
    if missing:
        raise ExportError(f"checkpoint {spec.source} lacks tensors its config implies: {missing[:5]}",
                          "check that config.json matches the weights (a pruned model must save its new config)")
    extra = sorted(stored - set(expected) - ({"lm_head.weight"} if spec.tie_word_embeddings else set()))
    if extra:
        raise ExportError(f"checkpoint {spec.source} has tensors edgeopt does not know: {extra[:5]}",
                          f"supported layouts: {', '.join(SUPPORTED_ARCHITECTURES)} ({spec.hf_architecture} given)")
    interleave = extras.rope_pairs_interleaved
    plans = []
    for name in expected:
        transform: Transform | None = None
        if interleave and name.endswith(("q_proj.weight", "q_proj.bias")):
            transform = lambda w, h=spec.num_heads: rope_pairs_interleaved(w, h)  # noqa: E731
        elif interleave and name.endswith(("k_proj.weight", "k_proj.bias")):
            transform = lambda w, h=spec.num_kv_heads: rope_pairs_interleaved(w, h)  # noqa: E731
        else:
            transform = extras.tensor_transform(name, spec, config or {})
        plans.append(TensorPlan(name, gguf_name(name, spec.arch), transform))
    return plans
