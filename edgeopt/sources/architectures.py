"""The checkpoint families edgeopt reads, and what sets each apart: which HF classes are decoders we export, which
tie their embeddings by default, fuse their projections or wrap their blocks in extra norms; which encoder families
embed or rerank, how their layers' tensors are named, and how many positions an input may use. The spec reader
(:mod:`edgeopt.sources.model_spec`) turns a config.json into a ModelSpec with these."""

from __future__ import annotations

from typing import Any

# HF architecture class -> the short name used in GGUF metadata and our registries.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",  # same graph as Llama; GGUF stores Mistral as llama
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",  # Phi-3, Phi-3.5, Phi-4-mini: fused qkv / gate_up, LongRoPE, partial rotary
    "GraniteForCausalLM": "granite",  # Granite 3.x: Llama layout plus four scalar multipliers
    "SmolLM3ForCausalLM": "smollm3",  # Llama layout; every 4th layer without RoPE (NoPE)
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",  # text-only Gemma 3 (model_type gemma3_text)
}
# Config classes that leave tie_word_embeddings at transformers' base default (True), so a config.json
# saved without the key ties; the others (Llama, Qwen2, Phi-3, Granite, ...) default to untied.
TIED_BY_DEFAULT = ("smollm3", "gemma2", "gemma3")
# Architectures whose checkpoints store q/k/v as one qkv_proj and gate/up as one gate_up_proj.
FUSED_PROJECTIONS = ("phi3",)
# Gemma 2/3 wrap attention and MLP in "sandwich" norms: post-attention, pre- and post-feed-forward.
SANDWICH_NORM_ARCHS = ("gemma2", "gemma3")
# Encoders (sentence embeddings), exported to ONNX only. Keyed by config model_type, since a
# feature-extractor checkpoint may list BertModel, BertForMaskedLM, ... or no architectures at all;
# the value is the base model class, which keeps a pooler layer (the *For* heads drop it). RoBERTa
# and XLM-R (multilingual-e5, many multilingual sentence-transformers) share BERT's tensor layout.
ENCODER_MODEL_TYPES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
                       "mpnet": "MPNetModel"}
# Per layer: the four attention projections and the two LayerNorms (BERT naming unless listed).
ENCODER_LAYER_NAMES = {
    "bert": (("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"),
             ("attention.output.LayerNorm", "output.LayerNorm")),
    "mpnet": (("attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o"),
              ("attention.LayerNorm", "output.LayerNorm")),
}
# These number positions after the padding id (pad + 1, pad + 2, ...), so pad + 1 position rows are
# never a token's: the usable context is max_position_embeddings - pad_token_id - 1.
POSITIONS_AFTER_PADDING = ("roberta", "xlm-roberta", "mpnet")
EMBEDDING_KIND = "embedding"
# A cross-encoder (sentence-transformers' CrossEncoder): a BERT with a one-logit classification head over a
# (query, document) pair, served on /v1/rerank. BERT's layout only: other families' heads are named otherwise.
RERANK_KIND = "rerank"
RERANK_MODEL_TYPES = ("bert",)


def encoder_input_limit(config: dict[str, Any], max_seq_length: int | None = None) -> int:
    """Most tokens (special tokens included) one encoder input may have: the rows of the position table
    a token can use, or sentence-transformers' ``max_seq_length`` when that is smaller."""
    limit = int(config.get("max_position_embeddings", 512))
    if config.get("model_type") in POSITIONS_AFTER_PADDING:
        limit -= int(config.get("pad_token_id") or 0) + 1
    return min(limit, max_seq_length or limit)
