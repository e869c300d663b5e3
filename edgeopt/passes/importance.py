"""How much each attention head, MLP channel and layer matters, so pruning removes the least useful.

Activation-based (Minitron): run calibration text through the model and measure
  * head i of layer l:    summed L2 norm of that head's attention output (the input of o_proj),
  * MLP channel j:        summed |activation| entering down_proj (act(gate) * up),
  * layer l:              block importance, 1 - cosine(hidden in, hidden out), summed over tokens
                          (ShortGPT): a layer that barely rotates the residual stream does little.
Data-free fallback (no calibration text): weight magnitudes, i.e. the norms of the rows/columns a
unit reads and writes; for a layer, the norms of the two matrices that write into the residual.
Higher score = more important. Scores of different layers are only compared within a kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgeopt.passes.fused import projection_weights


@dataclass
class Importance:
    heads: torch.Tensor  # [layers, num_heads]
    mlp: torch.Tensor  # [layers, intermediate_size]
    layers: torch.Tensor  # [layers]
    method: str  # "activation" or "magnitude"
    tokens: int = 0  # calibration tokens seen (0 for magnitude)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    return model.model.layers


def _head_geometry(model: nn.Module) -> tuple[int, int]:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_attention_heads, head_dim


@torch.no_grad()
def activation_importance(model: nn.Module, blocks: torch.Tensor, batch_size: int = 4) -> Importance:
    """Score units on ``blocks`` ([n, seq_len] token ids) with forward hooks; the model is unchanged."""
    layers = decoder_layers(model)
    num_heads, head_dim = _head_geometry(model)
    n_layers, inter = len(layers), model.config.intermediate_size
    heads = torch.zeros(n_layers, num_heads, dtype=torch.float64)
    mlp = torch.zeros(n_layers, inter, dtype=torch.float64)
    block = torch.zeros(n_layers, dtype=torch.float64)
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.self_attn.o_proj.register_forward_pre_hook(_head_hook(heads, i, num_heads, head_dim)))
        handles.append(layer.mlp.down_proj.register_forward_pre_hook(_mlp_hook(mlp, i)))
        handles.append(layer.register_forward_hook(_block_hook(block, i), with_kwargs=True))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, blocks.shape[0], batch_size):
            model(input_ids=blocks[start:start + batch_size], use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return Importance(heads, mlp, block, "activation", int(blocks.numel()))


def _head_hook(store: torch.Tensor, index: int, num_heads: int, head_dim: int):
    def hook(_module: nn.Module, args: tuple) -> None:
        x = args[0].float()
        per_head = x.reshape(*x.shape[:-1], num_heads, head_dim).norm(dim=-1)  # [B, S, H]
        store[index] += per_head.sum(dim=(0, 1)).double()
    return hook


def _mlp_hook(store: torch.Tensor, index: int):
    def hook(_module: nn.Module, args: tuple) -> None:
        store[index] += args[0].float().abs().sum(dim=(0, 1)).double()
    return hook


def _block_hook(store: torch.Tensor, index: int):
    def hook(_module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        hidden_in = args[0] if args else kwargs["hidden_states"]
        hidden_out = output[0] if isinstance(output, tuple) else output
        cos = torch.nn.functional.cosine_similarity(hidden_in.float(), hidden_out.float(), dim=-1)
        store[index] += (1.0 - cos).sum().double()
    return hook


@torch.no_grad()
def magnitude_importance(model: nn.Module) -> Importance:
    """Data-free scores from weight norms (see the module docstring)."""
    num_heads, head_dim = _head_geometry(model)
    heads, mlp, block = [], [], []
    for layer in decoder_layers(model):
        attn, ffn = layer.self_attn, layer.mlp
        q_weight, gate, up = projection_weights(model.config.model_type, attn, ffn, num_heads * head_dim)
        q = q_weight.float().reshape(num_heads, head_dim, -1).norm(dim=(1, 2))
        o = attn.o_proj.weight.float().reshape(-1, num_heads, head_dim).norm(dim=(0, 2))
        heads.append(q * o)
        mlp.append(gate.float().norm(dim=1) * up.float().norm(dim=1) * ffn.down_proj.weight.float().norm(dim=0))
        block.append(attn.o_proj.weight.float().norm() + ffn.down_proj.weight.float().norm())
    return Importance(torch.stack(heads).double(), torch.stack(mlp).double(), torch.stack(block).double(),
                      "magnitude")
