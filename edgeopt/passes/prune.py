"""The ``prune`` pass: structured pruning to a smaller *standard* HF checkpoint.

Shape (how many heads, channels, layers stay) comes from :mod:`edgeopt.planning.prune_shape`; which
ones stay comes from :mod:`edgeopt.passes.importance`. The pruned weights are loaded into a fresh
model built from the new config with ``strict=True``, so a slicing mistake fails here, not in an
exporter. Optional unstructured magnitude sparsity zeroes weights but shrinks nothing: dense
kernels (llama.cpp, onnxruntime CPU) do the same work on zeros, and the manifest says so.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from edgeopt.errors import PassError
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.passes import Pass, PassContext
from edgeopt.planning import HOLDOUT_TOKENS, PruneShape, request_from_params, shape_of, solve_shape
from edgeopt.passes.fused import join_fused, split_fused

KNOWN_PARAMS = {"ratio", "heads", "mlp", "layers", "calib_data", "calib_sha256", "calib_tokens", "sparsity",
                "eval_tokens", "threads"}
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                "chat_template.jinja", "generation_config.json", "vocab.json", "merges.txt")


class PrunePass(Pass):
    """Params: ratio, heads, mlp, layers (see PruneRequest); calib_data (text file), calib_tokens,
    sparsity (unstructured fraction, default 0), eval_tokens."""

    name = "prune"

    def run(self, model_dir: Path, out_dir: Path, ctx: PassContext) -> dict[str, Any]:
        import torch

        from edgeopt.passes.distil_data import calibration_blocks, eval_blocks
        from edgeopt.measuring.torch_metrics import compare_models, load_causal_lm

        started = time.perf_counter()
        unknown = set(self.params) - KNOWN_PARAMS
        if unknown:
            raise PassError(f"unknown prune parameter(s) {sorted(unknown)}", f"valid: {', '.join(sorted(KNOWN_PARAMS))}")
        torch.set_num_threads(min(torch.get_num_threads(), int(self.params.get("threads", 2))))
        spec = load_model_spec(str(model_dir))
        shape = solve_shape(spec, request_from_params(self.params))
        model = load_causal_lm(model_dir)
        calib_file = self.params.get("calib_data") or ctx.data_file
        blocks = calibration_blocks(model_dir, calib_file, int(self.params.get("calib_tokens", 16384)))
        importance = _score(model, blocks)
        pruned = prune_model(model, shape, importance)
        sparsity = float(self.params.get("sparsity", 0.0))
        if sparsity:
            apply_magnitude_sparsity(pruned, sparsity)
        save_checkpoint(pruned, model_dir, out_dir)
        evaluation, source = eval_blocks(model_dir, ctx.data_file, calib_file, int(self.params.get("eval_tokens", HOLDOUT_TOKENS)))
        metrics: dict[str, Any] = {
            "params_before": spec.num_parameters, "params_after": _count(pruned),
            "non_embedding_params_before": spec.num_non_embedding_parameters,
            "non_embedding_params_after": load_model_spec(str(out_dir)).num_non_embedding_parameters,
            "shape_before": vars(shape_of(spec)), "shape_after": vars(shape),
            "importance": importance.method, "calibration_tokens": importance.tokens, "eval_data": source,
        }
        metrics["non_embedding_reduction"] = 1 - metrics["non_embedding_params_after"] / spec.num_non_embedding_parameters
        if sparsity:
            metrics["sparsity"] = sparsity
            metrics["sparsity_note"] = "zeroed weights are still stored and computed: no size or speed gain without sparse kernels"
        original = load_causal_lm(ctx.original_model_dir)
        metrics.update(compare_models(original, pruned, evaluation, prefix=""))
        metrics["seconds"] = time.perf_counter() - started
        return metrics


def _score(model: Any, blocks: Any) -> Any:
    from edgeopt.passes.importance import activation_importance, magnitude_importance

    return activation_importance(model, blocks) if blocks is not None else magnitude_importance(model)


def _count(model: Any) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def prune_model(model: Any, shape: PruneShape, importance: Any) -> Any:
    """A new model of ``shape`` holding the most important units of ``model`` (which is unchanged)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    keep_layers = sorted(torch.topk(importance.layers, shape.num_layers).indices.tolist())
    state = model.state_dict()
    new_state = {k: v for k, v in state.items() if not k.startswith("model.layers.")}
    for new_index, old_index in enumerate(keep_layers):
        heads = _keep_heads(importance.heads[old_index], cfg.num_attention_heads, cfg.num_key_value_heads,
                            shape.num_heads, shape.num_kv_heads)
        channels = sorted(torch.topk(importance.mlp[old_index], shape.intermediate_size).indices.tolist())
        layer_state = {k[len(f"model.layers.{old_index}."):]: v for k, v in state.items()
                       if k.startswith(f"model.layers.{old_index}.")}
        layer_state, fused = split_fused(layer_state, cfg.num_attention_heads * head_dim,
                                         cfg.num_key_value_heads * head_dim)
        sliced = _slice_layer(layer_state, heads, channels, head_dim, cfg.num_attention_heads == cfg.num_key_value_heads)
        if fused:  # Phi-3: q/k/v and gate/up were sliced with the same heads and channels; stack them back
            sliced = join_fused(sliced)
        new_state.update({f"model.layers.{new_index}.{k}": v for k, v in sliced.items()})
    new_cfg = _pruned_config(cfg, shape, head_dim, keep_layers)
    pruned = AutoModelForCausalLM.from_config(new_cfg, dtype=next(model.parameters()).dtype)
    missing, unexpected = pruned.load_state_dict(new_state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and new_cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise PassError(f"pruned weights do not match the pruned config: missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]}", "this is a bug in edgeopt's prune pass; please report it")
    pruned.tie_weights()
    return pruned.eval()


def _keep_heads(scores: Any, heads: int, kv_heads: int, new_heads: int, new_kv_heads: int) -> list[int]:
    """Query heads to keep: the best ``new_heads / kv_heads`` of every GQA group, or the best heads for MHA."""
    import torch

    if heads == kv_heads:
        return sorted(torch.topk(scores, new_heads).indices.tolist())
    assert new_kv_heads == kv_heads, "GQA pruning keeps every KV head"
    group, per_group = heads // kv_heads, new_heads // kv_heads
    keep: list[int] = []
    for g in range(kv_heads):
        best = torch.topk(scores[g * group:(g + 1) * group], per_group).indices
        keep += sorted((best + g * group).tolist())
    return keep


def _slice_layer(state: dict[str, Any], heads: list[int], channels: list[int], head_dim: int,
                 multi_head: bool) -> dict[str, Any]:
    import torch

    rows = torch.tensor([h * head_dim + d for h in heads for d in range(head_dim)])
    idx = torch.tensor(channels)
    out = dict(state)
    out["self_attn.q_proj.weight"] = state["self_attn.q_proj.weight"][rows].clone()
    out["self_attn.o_proj.weight"] = state["self_attn.o_proj.weight"][:, rows].clone()
    if "self_attn.q_proj.bias" in state:
        out["self_attn.q_proj.bias"] = state["self_attn.q_proj.bias"][rows].clone()
    if multi_head:  # every head is its own KV group: its key and value heads go with it
        for name in ("k_proj", "v_proj"):
            for kind in ("weight", "bias"):
                key = f"self_attn.{name}.{kind}"
                if key in state:
                    out[key] = state[key][rows].clone()
    out["mlp.gate_proj.weight"] = state["mlp.gate_proj.weight"][idx].clone()
    out["mlp.up_proj.weight"] = state["mlp.up_proj.weight"][idx].clone()
    out["mlp.down_proj.weight"] = state["mlp.down_proj.weight"][:, idx].clone()
    return out


def _pruned_config(cfg: Any, shape: PruneShape, head_dim: int, keep_layers: list[int]) -> Any:
    import copy

    new = copy.deepcopy(cfg)
    new.num_hidden_layers = shape.num_layers
    new.num_attention_heads = shape.num_heads
    new.num_key_value_heads = shape.num_kv_heads
    new.intermediate_size = shape.intermediate_size
    new.head_dim = head_dim  # no longer hidden_size // num_attention_heads once heads are pruned
    if getattr(new, "layer_types", None):  # per-layer attention kinds (sliding/full) follow their layers
        new.layer_types = [cfg.layer_types[i] for i in keep_layers]
    if getattr(new, "no_rope_layers", None):  # SmolLM3: which layers use rope follows their layers too
        new.no_rope_layers = [cfg.no_rope_layers[i] for i in keep_layers]
    if getattr(new, "max_window_layers", None) is not None:
        new.max_window_layers = min(new.max_window_layers, shape.num_layers)
    return new


def apply_magnitude_sparsity(model: Any, fraction: float) -> None:
    """Zero the smallest-magnitude ``fraction`` of each decoder linear weight (per tensor)."""
    import torch

    if not 0.0 < fraction < 1.0:
        raise PassError(f"sparsity {fraction} is outside (0, 1)", "pass a fraction such as 0.5")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("model.layers.") and param.dim() == 2:
                k = int(param.numel() * fraction)
                if k:
                    threshold = param.abs().flatten().kthvalue(k).values
                    param.masked_fill_(param.abs() <= threshold, 0.0)


def save_checkpoint(model: Any, source_dir: Path, out_dir: Path) -> None:
    """Save weights + config as safetensors and carry the tokenizer files over unchanged."""
    model.save_pretrained(out_dir, safe_serialization=True)
    for fname in COPIED_FILES:
        if (source_dir / fname).is_file() and not (out_dir / fname).exists():
            shutil.copy2(source_dir / fname, out_dir / fname)
