"""Fused projections (Phi-3's ``qkv_proj`` and ``gate_up_proj``) seen as their separate parts.

Pruning slices q/k/v rows per head and gate/up rows per MLP channel. A fused checkpoint stores q, k
and v stacked in one matrix (q rows, then k, then v) and gate and up in another (gate rows first);
splitting them into the separate names, slicing, and stacking back keeps every part pruned with the
same heads and channels.
"""

from __future__ import annotations

from typing import Any

from edgeopt.sources.architectures import FUSED_PROJECTIONS  # GGUF arch names, which are these models' model_type

QKV, GATE_UP = "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"


def split_fused(layer_state: dict[str, Any], q_rows: int, kv_rows: int) -> tuple[dict[str, Any], bool]:
    """(state with q/k/v_proj and gate/up_proj, whether it was fused); an unfused state is returned as is."""
    if QKV not in layer_state:
        return layer_state, False
    out = {k: v for k, v in layer_state.items() if k not in (QKV, GATE_UP)}
    qkv = layer_state[QKV]
    out["self_attn.q_proj.weight"] = qkv[:q_rows]
    out["self_attn.k_proj.weight"] = qkv[q_rows:q_rows + kv_rows]
    out["self_attn.v_proj.weight"] = qkv[q_rows + kv_rows:]
    out["mlp.gate_proj.weight"], out["mlp.up_proj.weight"] = layer_state[GATE_UP].chunk(2, dim=0)
    return out, True


def join_fused(layer_state: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`split_fused`."""
    import torch

    parts = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "mlp.gate_proj.weight", "mlp.up_proj.weight")
    out = {k: v for k, v in layer_state.items() if k not in parts}
    out[QKV] = torch.cat([layer_state[p] for p in parts[:3]], dim=0).contiguous()
    out[GATE_UP] = torch.cat([layer_state[p] for p in parts[3:]], dim=0).contiguous()
    return out


def projection_weights(model_type: str, attn: Any, ffn: Any, q_rows: int) -> tuple[Any, Any, Any]:
    """(q, gate, up) weight matrices of a decoder layer's modules, fused or not."""
    if model_type in FUSED_PROJECTIONS:
        gate, up = ffn.gate_up_proj.weight.chunk(2, dim=0)
        return attn.qkv_proj.weight[:q_rows], gate, up
    return attn.q_proj.weight, ffn.gate_proj.weight, ffn.up_proj.weight
