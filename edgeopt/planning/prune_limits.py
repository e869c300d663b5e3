"""What structured pruning may not change in a given architecture, and why (config-only, no torch).

Some runtimes build an architecture's graph with fixed assumptions that a pruned checkpoint would
break; pruning that dimension would give a model that transformers runs but llama.cpp refuses to load
(or computes differently). Those dimensions are refused up front with the reason, and a ``--prune
RATIO`` request takes its reduction from the dimensions that remain.
"""

from __future__ import annotations

from edgeopt.errors import PassError
from edgeopt.sources.model_spec import ModelSpec

# GGUF arch -> why its attention heads cannot be removed.
_FIXED_HEADS = {
    "qwen2": "llama.cpp's qwen2 graph requires num_attention_heads x head_dim == hidden_size "
             "(its attn_output is hidden x hidden)",
    "phi3": "llama.cpp's phi3 graph requires num_attention_heads x head_dim == hidden_size "
            "(its attn_output is hidden x hidden)",
}
# GGUF arch -> why whole layers cannot be removed.
_FIXED_LAYERS = {
    "smollm3": "llama.cpp's smollm3 graph places the layers without rope at every 4th layer; removing layers "
               "would move SmolLM3's no_rope_layers off that pattern",
}


def fixed_heads_reason(spec: ModelSpec) -> str | None:
    """Why this model's heads must stay as they are, or None when they may be pruned."""
    return _FIXED_HEADS.get(spec.arch)


def fixed_layers_reason(spec: ModelSpec) -> str | None:
    """Why this model's depth must stay as it is, or None when layers may be removed."""
    return _FIXED_LAYERS.get(spec.arch)


def check_request(spec: ModelSpec, heads: float | None, layers: int | None) -> None:
    """Refuse an explicit request to prune a dimension the architecture fixes, naming it and why."""
    for knob, asked, reason in (("--prune-heads", heads, fixed_heads_reason(spec)),
                                ("--prune-layers", layers, fixed_layers_reason(spec))):
        if asked and reason:
            raise PassError(f"{knob} {asked}: {spec.hf_architecture} cannot have its "
                            f"{'attention heads' if knob == '--prune-heads' else 'layers'} pruned: {reason}",
                            "prune the other dimensions instead (--prune-mlp, --prune-layers/--prune-heads), "
                            "or use --prune RATIO, which takes the reduction from what can be pruned")
