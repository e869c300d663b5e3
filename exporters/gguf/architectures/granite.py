"""Granite 3.x (``GraniteForCausalLM``) as llama.cpp's ``granite`` architecture.

The Llama layout plus four scalars, each mapped to the key llama.cpp's granite graph reads:
``embedding_multiplier`` (token embeddings x m) -> ``embedding_scale``; ``residual_multiplier``
(each block's attention and MLP output x m before the residual add) -> ``residual_scale``;
``attention_multiplier`` (the q.k scale, instead of 1/sqrt(head_dim)) -> ``attention.scale``;
``logits_scaling`` (logits / s) -> ``logit_scale``. All four are always written: transformers'
defaults are 1.0, and an absent attention scale would make llama.cpp fall back to 1/sqrt(head_dim).
"""

from __future__ import annotations

from edgeopt.sources.model_spec import ModelSpec
from edgeopt.exporters.gguf.architectures.extras import ArchExtras, Config


def add_metadata(writer, spec: ModelSpec, config: Config) -> None:
    writer.add_embedding_scale(float(config.get("embedding_multiplier", 1.0)))
    writer.add_residual_scale(float(config.get("residual_multiplier", 1.0)))
    writer.add_attention_scale(float(config.get("attention_multiplier", 1.0)))
    writer.add_logit_scale(float(config.get("logits_scaling", 1.0)))


EXTRAS = ArchExtras(rope_pairs_interleaved=True, add_metadata=add_metadata)
