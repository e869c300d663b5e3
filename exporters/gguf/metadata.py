"""Model hyperparameters as GGUF metadata: what llama.cpp needs to rebuild the graph.

Everything here comes from config.json through :class:`ModelSpec`, plus the rope scaling block,
which has three shapes in the wild (linear, YaRN, Llama 3) and two homes (``rope_scaling`` in
transformers 4, ``rope_parameters`` in transformers 5).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import extras_for


def rope_scaling(config: dict[str, Any]) -> dict[str, Any] | None:
    """The rope scaling parameters, or None when rope is unscaled."""
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}
    params = params.get("full_attention", params)  # per-layer-type blocks (Gemma 3): global layers
    kind = params.get("rope_type") or params.get("type")
    if kind in (None, "default"):
        return None
    return {**params, "rope_type": kind}


def llama3_rope_factors(scaling: dict[str, Any], spec: ModelSpec) -> np.ndarray:
    """Per-frequency divisors of Llama 3.x rope scaling, stored as the ``rope_freqs.weight`` tensor.

    Low frequencies (long wavelengths) are divided by ``factor``, high ones kept, and the band in
    between blended smoothly; this is the published Llama 3.1 recipe expressed as factors.
    """
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context = float(scaling.get("original_max_position_embeddings", 8192))
    low_wavelen = old_context / low_freq_factor
    high_wavelen = old_context / high_freq_factor
    dims = np.arange(0, spec.head_dim, 2, dtype=np.float64)
    freqs = 1.0 / (spec.rope_theta ** (dims / spec.head_dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def add_hyperparameters(writer: Any, spec: ModelSpec, config: dict[str, Any], name: str) -> None:
    """Write the architecture block (``{arch}.*`` keys) of the GGUF header."""
    import gguf

    writer.add_name(name)
    writer.add_context_length(spec.max_position_embeddings)
    writer.add_embedding_length(spec.hidden_size)
    writer.add_block_count(spec.num_layers)
    writer.add_feed_forward_length(spec.intermediate_size)
    writer.add_head_count(spec.num_heads)
    writer.add_head_count_kv(spec.num_kv_heads)
    writer.add_layer_norm_rms_eps(spec.rms_norm_eps)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_rope_dimension_count(spec.rope_dim)  # < head_dim with partial rotary (Phi-4-mini)
    # An explicit head_dim (Qwen3, pruned heads) differs from hidden/heads; say so or llama.cpp guesses.
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_vocab_size(spec.vocab_size)
    extras = extras_for(spec.arch)
    extras.add_metadata(writer, spec, config)
    scaling = rope_scaling(config)
    if scaling is None or scaling["rope_type"] == "llama3" or scaling["rope_type"] in extras.rope_scaling_kinds:
        return  # llama3 scaling travels as the rope_freqs tensor; the family's own kinds are written above
    kind = scaling["rope_type"]
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    elif kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        original = scaling.get("original_max_position_embeddings", spec.max_position_embeddings)
        writer.add_rope_scaling_orig_ctx_len(int(original))
    else:
        raise ExportError(f"rope scaling {kind!r} of {spec.source} is not supported",
                          "supported rope scaling: linear, yarn, llama3 (or none)")
