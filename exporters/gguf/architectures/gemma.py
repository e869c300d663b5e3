"""Gemma 2 and Gemma 3 (text) as llama.cpp's ``gemma2`` / ``gemma3`` architectures.

What differs from Llama, and how each difference reaches llama.cpp (src/models/gemma2.cpp, gemma3.cpp):

- RMSNorms scale by ``(1 + w)``; llama.cpp multiplies by the stored weight, so the +1 is folded in.
- Norm names: Gemma's ``post_attention_layernorm`` is a *post*-attention norm (llama.cpp
  ``post_attention_norm``), its ``pre_feedforward_layernorm`` is the usual ``ffn_norm`` and
  ``post_feedforward_layernorm`` becomes ``post_ffw_norm``.
- Attention scale: HF uses ``query_pre_attn_scalar ** -0.5``; llama.cpp ignores that key and uses
  ``1/sqrt(head_dim)`` (or ``1/sqrt(hidden/heads)`` for the 27B layer counts). Where the two differ
  the ratio is folded into the queries (q_proj rows for Gemma 2, the q norm for Gemma 3, whose
  norm would undo a q_proj scale), which is exact because RoPE is linear.
- Soft-capping (attention logits: Gemma 2 only; final logits), the sliding window and which layers
  use it, the local rope base of sliding layers and linear rope scaling of global ones are metadata.
- The embedding scale sqrt(hidden), GELU-tanh and the tied output are built into llama.cpp's graphs.

What llama.cpp cannot express is refused here, before any file is written.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import ArchExtras


# Suffix after "model.layers.{i}." -> suffix after "blk.{i}." where Gemma differs from Llama.
GEMMA_LAYER_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
# llama.cpp's built-in layer pattern when the GGUF gives none: every 2nd (Gemma 2) / 6th (Gemma 3)
# layer is global, the others slide (llama_hparams::set_swa_pattern).
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6}
# cap * tanh(x / cap) == x to float32 precision for any logit a model produces (|x| << 1e9).
UNREACHABLE_CAP = 1e9
# Layer counts for which llama.cpp scales attention by 1/sqrt(hidden/heads) (the 27B models).
_SCALE_BY_HIDDEN_LAYERS = {"gemma2": 46, "gemma3": 62}


def rope_blocks(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global, sliding) rope parameters from transformers 4 keys or transformers 5's nested block."""
    params = config.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        return dict(params.get("full_attention") or {}), dict(params.get("sliding_attention") or {})
    scaling = dict(config.get("rope_scaling") or params)
    full = {**scaling, "rope_theta": config.get("rope_theta", scaling.get("rope_theta", 10000.0))}
    local = {"rope_theta": config.get("rope_local_base_freq", full["rope_theta"])}
    return full, local


def sliding_layers(spec: ModelSpec, config: dict[str, Any]) -> list[bool]:
    """Which layers attend through the sliding window, as the checkpoint declares it."""
    types = config.get("layer_types")
    if types:
        if len(types) != spec.num_layers:
            raise ExportError(f"config.json of {spec.source} lists {len(types)} layer_types for "
                              f"{spec.num_layers} layers", "save the config that matches the (pruned) weights")
        return [t == "sliding_attention" for t in types]
    period = int(config.get("sliding_window_pattern") or config.get("_sliding_window_pattern")
                 or _DEFAULT_PATTERN[spec.arch])
    return [(i + 1) % period != 0 for i in range(spec.num_layers)]


def llama_cpp_attention_scale(spec: ModelSpec) -> float:
    """The query scale llama.cpp's gemma2/gemma3 graphs apply (it does not read query_pre_attn_scalar)."""
    if spec.num_layers == _SCALE_BY_HIDDEN_LAYERS[spec.arch]:
        return 1.0 / math.sqrt(spec.hidden_size // spec.num_heads)
    return 1.0 / math.sqrt(spec.head_dim)


def query_correction(spec: ModelSpec, config: dict[str, Any]) -> float:
    """Factor folded into the queries so llama.cpp's scale times it equals HF's; 1.0 for real models."""
    wanted = float(config.get("query_pre_attn_scalar") or spec.head_dim) ** -0.5
    return wanted / llama_cpp_attention_scale(spec)


def check_gemma(spec: ModelSpec, config: dict[str, Any]) -> None:
    """Refuse what llama.cpp's Gemma graphs would silently compute differently from transformers."""
    refuse = []
    if spec.arch == "gemma2" and not spec.tie_word_embeddings:
        refuse.append("an untied lm_head (llama.cpp's gemma2 always uses the token embedding as output)")
    if spec.arch == "gemma3" and config.get("attn_logit_softcapping"):
        refuse.append(f"attn_logit_softcapping={config['attn_logit_softcapping']} (llama.cpp's gemma3 has no "
                      "attention soft-capping)")
    if config.get("use_bidirectional_attention"):
        refuse.append("use_bidirectional_attention (llama.cpp runs Gemma causally)")
    if spec.attention_bias:
        refuse.append("attention biases (llama.cpp's Gemma graphs have none)")
    if config.get("hidden_activation", "gelu_pytorch_tanh") not in ("gelu_pytorch_tanh", "gelu_tanh"):
        refuse.append(f"hidden_activation={config['hidden_activation']!r} (llama.cpp's Gemma uses GELU-tanh)")
    full, local = rope_blocks(config)
    if (local.get("rope_type") or "default") != "default":
        refuse.append(f"rope scaling {local['rope_type']!r} on sliding layers (llama.cpp scales global layers only)")
    if spec.arch == "gemma2" and (full.get("rope_type") or full.get("type") or "default") != "default":
        refuse.append("rope scaling on Gemma 2 (llama.cpp's gemma2 applies the same rope to every layer)")
    if refuse:
        raise ExportError(f"{spec.hf_architecture} checkpoint {spec.source} has " + "; ".join(refuse),
                          "export it with --format onnx or --format torch instead")


def add_gemma_hyperparameters(writer: Any, spec: ModelSpec, config: dict[str, Any]) -> None:
    """Soft-caps, sliding window and layer pattern, local rope base: the ``gemma2.*``/``gemma3.*`` extras."""
    check_gemma(spec, config)
    if spec.arch == "gemma2":  # llama.cpp's gemma2 always caps both: "no cap" becomes a cap nothing reaches
        writer.add_attn_logit_softcapping(float(config.get("attn_logit_softcapping") or UNREACHABLE_CAP))
        writer.add_final_logit_softcapping(float(config.get("final_logit_softcapping") or UNREACHABLE_CAP))
    elif config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
    sliding = sliding_layers(spec, config)
    if any(sliding):
        writer.add_sliding_window(int(config["sliding_window"]))
    if sliding != [(i + 1) % _DEFAULT_PATTERN[spec.arch] != 0 for i in range(spec.num_layers)]:
        writer.add_sliding_window_pattern(sliding)  # only where llama.cpp's default would be wrong
    if spec.arch == "gemma3":  # the global base is the generic rope.freq_base (ModelSpec.rope_theta)
        writer.add_rope_freq_base_swa(float(rope_blocks(config)[1].get("rope_theta", 10000.0)))


def gemma_transform(hf_name: str, spec: ModelSpec, config: dict[str, Any]) -> Any:
    """The layout change one Gemma tensor needs (None when it is written as stored)."""
    correction = query_correction(spec, config)
    fold_queries = not math.isclose(correction, 1.0, rel_tol=0.0, abs_tol=1e-12)
    if spec.arch == "gemma3" and fold_queries and hf_name.endswith("self_attn.q_norm.weight"):
        return lambda w: ((w.astype(np.float32) + 1.0) * np.float32(correction)).astype(np.float32)
    if hf_name.endswith("norm.weight"):
        return lambda w: w.astype(np.float32) + np.float32(1.0)
    if spec.arch == "gemma2" and fold_queries and hf_name.endswith("self_attn.q_proj.weight"):
        return lambda w: w * np.asarray(correction, dtype=w.dtype)
    return None


# Gemma runs with llama.cpp's NeoX rope (HF's half-split layout): q/k rows are copied as stored.
EXTRAS = ArchExtras(layer_names=GEMMA_LAYER_NAMES, check=check_gemma, add_metadata=add_gemma_hyperparameters,
                    tensor_transform=gemma_transform)
