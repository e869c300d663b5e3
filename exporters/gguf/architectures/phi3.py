"""Phi-3, Phi-3.5 and Phi-4-mini (``Phi3ForCausalLM``) as llama.cpp's ``phi3`` architecture.

* q/k/v are one ``qkv_proj`` and gate/up one ``gate_up_proj`` in the checkpoint; llama.cpp's phi3
  graph reads them fused as ``attn_qkv`` and ``ffn_up`` (gate rows first, split by its SwiGLU), so
  they are copied unsplit. Rope is NeoX style, as in transformers: no row reordering.
* LongRoPE (``rope_scaling`` type ``longrope``, formerly ``su``): the per-dimension-pair
  ``short_factor`` / ``long_factor`` divisors become the ``rope_factors_short`` / ``rope_factors_long``
  tensors, and the cos/sin magnitude correction becomes ``rope.scaling.attn_factor``. llama.cpp picks
  the long factors when its context exceeds ``original_max_position_embeddings`` (written as
  ``rope.scaling.original_context_length``); transformers picks them when the sequence does.
* Partial rotary (Phi-4-mini's ``partial_rotary_factor`` 0.75) is the rope dimension count
  (ModelSpec.rope_dim); the factor lists then have rope_dim / 2 entries.
* ``sliding_window`` is written as llama.cpp's converter does, but llama.cpp's phi3 graph does not
  apply it (it attends to the whole context), so beyond the window the two differ.
"""

from __future__ import annotations

import math

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import ArchExtras, Config
from edgeopt.exporters.gguf.metadata import rope_scaling

LONGROPE_KINDS = ("longrope", "su")


def longrope_scaling(config: Config) -> dict | None:
    """The rope scaling parameters when they are LongRoPE, else None."""
    scaling = rope_scaling(config)
    return scaling if scaling is not None and scaling["rope_type"] in LONGROPE_KINDS else None


def original_context(spec: ModelSpec, config: Config) -> int:
    """The pre-training window LongRoPE extends (transformers reads the top-level config key)."""
    return int(config.get("original_max_position_embeddings") or spec.max_position_embeddings)


def longrope_attn_factor(spec: ModelSpec, config: Config) -> float:
    """The cos/sin magnitude transformers applies: sqrt(1 + ln(scale) / ln(original window)) for a
    scale (context / original window) above 1. (Phi3Config admits no explicit attention_factor.)"""
    original = original_context(spec, config)
    scale = spec.max_position_embeddings / original
    return math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0


def check(spec: ModelSpec, config: Config) -> None:
    if spec.num_heads * spec.head_dim != spec.hidden_size:
        raise ExportError(
            f"{spec.source}: {spec.num_heads} heads x head_dim {spec.head_dim} != hidden_size {spec.hidden_size}; "
            "llama.cpp's phi3 graph requires them equal (its attn_output is hidden x hidden)",
            "export this checkpoint with --format onnx, or do not prune Phi-3 attention heads")
    scaling = longrope_scaling(config)
    if scaling is None:
        return
    pairs = spec.rope_dim // 2
    for key in ("short_factor", "long_factor"):
        factors = scaling.get(key)
        if not isinstance(factors, list) or len(factors) != pairs:
            raise ExportError(f"{spec.source}: rope_scaling.{key} has {len(factors or [])} entries, the rotated "
                              f"dimensions need {pairs} (rope dims {spec.rope_dim} / 2)",
                              "fix rope_scaling in config.json (one factor per rotated dimension pair)")


def add_metadata(writer, spec: ModelSpec, config: Config) -> None:
    writer.add_rope_scaling_orig_ctx_len(original_context(spec, config))
    # 0 means "no window" to llama.cpp, which tells Phi-4 apart from Phi-3 the same way.
    writer.add_sliding_window(int(config.get("sliding_window") or 0))
    if longrope_scaling(config) is not None:
        writer.add_rope_scaling_attn_factors(longrope_attn_factor(spec, config))


def extra_tensors(spec: ModelSpec, config: Config) -> list[tuple[str, np.ndarray]]:
    scaling = longrope_scaling(config)
    if scaling is None:
        return []
    return [("rope_factors_long.weight", np.asarray(scaling["long_factor"], dtype=np.float32)),
            ("rope_factors_short.weight", np.asarray(scaling["short_factor"], dtype=np.float32))]


EXTRAS = ArchExtras(
    layer_names={"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"},
    rope_scaling_kinds=LONGROPE_KINDS, check=check, add_metadata=add_metadata, extra_tensors=extra_tensors)
