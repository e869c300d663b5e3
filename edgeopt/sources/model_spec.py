"""What edgeopt needs to know about a checkpoint, read from its ``config.json`` alone (no weights).

The planner sizes weights and KV cache from this; exporters use the tensor list to name and
quantize tensors. Reading a hub id downloads only ``config.json`` (and only when a user asks for one;
tests always use local directories).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.errors import ModelNotFoundError, UnsupportedArchitectureError
from edgeopt.sizing.budget import kv_bytes_per_token, kv_elements_per_token
from edgeopt.sources.architectures import (EMBEDDING_KIND, ENCODER_LAYER_NAMES, ENCODER_MODEL_TYPES,
                                           FUSED_PROJECTIONS, RERANK_KIND, RERANK_MODEL_TYPES, SANDWICH_NORM_ARCHS,
                                           SUPPORTED_ARCHITECTURES, TIED_BY_DEFAULT)

@dataclass(frozen=True)
class TensorInfo:
    """One weight tensor, named the HF way, with its shape in PyTorch order (out, in)."""

    name: str
    shape: tuple[int, ...]
    layer: int | None = None  # transformer block index, None for embeddings/final norm/head

    @property
    def numel(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


@dataclass(frozen=True)
class ModelSpec:
    source: str
    hf_architecture: str
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    qk_norm: bool
    rope_theta: float
    rms_norm_eps: float
    torch_dtype: str
    kind: str = "causal-lm"  # or EMBEDDING_KIND / RERANK_KIND: an encoder, which keeps no KV cache
    type_vocab_size: int = 0  # encoders: token-type (segment) embeddings
    has_pooler: bool = False  # encoders: BertModel's pooler dense layer
    relative_attention_buckets: int = 0  # MPNet: rows of its relative-position bias table
    rotary_dim: int = 0  # dimensions of a head that RoPE rotates (partial rotary); 0: all of head_dim
    sandwich_norms: bool = False  # Gemma 2/3: post-attention, pre- and post-feed-forward norms

    @property
    def rope_dim(self) -> int:
        return self.rotary_dim or self.head_dim

    @property
    def fused_projections(self) -> bool:
        return self.arch in FUSED_PROJECTIONS

    @property
    def is_encoder(self) -> bool:
        return self.kind in (EMBEDDING_KIND, RERANK_KIND)

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def kv_elements_per_token(self) -> int:
        """Cached K and V elements one token costs across every layer; encoders keep no KV cache: 0."""
        if self.is_encoder:
            return 0
        return kv_elements_per_token(self.num_layers, self.num_kv_heads, self.head_dim)

    def kv_bytes_per_token(self, bytes_per_element: float) -> int:
        return kv_bytes_per_token(self.kv_elements_per_token, bytes_per_element)

    def tensors(self) -> list[TensorInfo]:
        """Every weight tensor of the checkpoint, in HF naming, in file order."""
        if self.is_encoder:
            return self._encoder_tensors()
        h, q, kv, inter = self.hidden_size, self.num_heads * self.head_dim, self.kv_dim, self.intermediate_size
        out = [TensorInfo("model.embed_tokens.weight", (self.vocab_size, h))]
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            if self.fused_projections:  # Phi-3 order: q rows, then k, then v; gate rows, then up
                attn = [(p + "self_attn.qkv_proj.weight", (q + 2 * kv, h))]
                mlp = [(p + "mlp.gate_up_proj.weight", (2 * inter, h))]
            else:
                attn = [(p + f"self_attn.{n}_proj.weight", (w, h)) for n, w in (("q", q), ("k", kv), ("v", kv))]
                mlp = [(p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h))]
            norms = [(p + "post_attention_layernorm.weight", (h,))]
            if self.sandwich_norms:
                norms += [(p + "pre_feedforward_layernorm.weight", (h,)), (p + "post_feedforward_layernorm.weight", (h,))]
            layer = [(p + "input_layernorm.weight", (h,)), *attn, (p + "self_attn.o_proj.weight", (h, q)),
                     *norms, *mlp, (p + "mlp.down_proj.weight", (h, inter))]
            if self.attention_bias:
                layer += [(p + "self_attn.q_proj.bias", (q,)), (p + "self_attn.k_proj.bias", (kv,)),
                          (p + "self_attn.v_proj.bias", (kv,))]
            if self.qk_norm:
                layer += [(p + "self_attn.q_norm.weight", (self.head_dim,)),
                          (p + "self_attn.k_norm.weight", (self.head_dim,))]
            out += [TensorInfo(name, shape, i) for name, shape in layer]
        out.append(TensorInfo("model.norm.weight", (h,)))
        if not self.tie_word_embeddings:
            out.append(TensorInfo("lm_head.weight", (self.vocab_size, h)))
        return out

    def _encoder_tensors(self) -> list[TensorInfo]:
        """HF naming of BertModel (RoBERTa's too) or MPNetModel; embedding tables count as embeddings."""
        h, inter = self.hidden_size, self.intermediate_size
        out = [TensorInfo("embeddings.word_embeddings.weight", (self.vocab_size, h)),
               TensorInfo("embeddings.position_embeddings.weight", (self.max_position_embeddings, h))]
        if self.type_vocab_size:
            out.append(TensorInfo("embeddings.token_type_embeddings.weight", (self.type_vocab_size, h)))
        out += [TensorInfo("embeddings.LayerNorm.weight", (h,)), TensorInfo("embeddings.LayerNorm.bias", (h,))]
        projections, norms = ENCODER_LAYER_NAMES.get(self.arch, ENCODER_LAYER_NAMES["bert"])
        for i in range(self.num_layers):
            p = f"encoder.layer.{i}."
            layer = []
            for name, shape in ([(proj, (h, h)) for proj in projections]
                                + [("intermediate.dense", (inter, h)), ("output.dense", (h, inter))]):
                layer += [(p + name + ".weight", shape), (p + name + ".bias", (shape[0],))]
            for norm in norms:
                layer += [(p + norm + ".weight", (h,)), (p + norm + ".bias", (h,))]
            out += [TensorInfo(name, shape, i) for name, shape in layer]
        if self.arch == "mpnet":  # one relative-position bias table shared by all layers (an embedding)
            out.append(TensorInfo("encoder.relative_attention_bias.weight",
                                  (self.relative_attention_buckets, self.num_heads)))
        if self.has_pooler:
            out += [TensorInfo("pooler.dense.weight", (h, h)), TensorInfo("pooler.dense.bias", (h,))]
        if self.kind == RERANK_KIND:  # BertForSequenceClassification: the encoder under "bert.", one logit on top
            out = [TensorInfo(f"{self.arch}.{t.name}", t.shape, t.layer) for t in out]
            out += [TensorInfo("classifier.weight", (1, h)), TensorInfo("classifier.bias", (1,))]
        return out

    @property
    def num_parameters(self) -> int:
        return sum(t.numel for t in self.tensors())

    @property
    def num_embedding_parameters(self) -> int:
        return sum(t.numel for t in self.tensors() if t.layer is None and len(t.shape) == 2)

    @property
    def num_non_embedding_parameters(self) -> int:
        return self.num_parameters - self.num_embedding_parameters


def spec_from_config(config: dict[str, Any], source: str) -> ModelSpec:
    archs = config.get("architectures") or []
    hf_arch = archs[0] if archs else f"<none; model_type={config.get('model_type')!r}>"
    is_encoder = config.get("model_type") in ENCODER_MODEL_TYPES and not hf_arch.endswith("ForCausalLM")
    if hf_arch not in SUPPORTED_ARCHITECTURES and not is_encoder:
        raise UnsupportedArchitectureError(
            f"architecture {hf_arch} of {source} is not supported",
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}, and encoders of model_type "
            f"{', '.join(ENCODER_MODEL_TYPES)}",
        )
    _check_required(config, source)
    if is_encoder:
        return _encoder_spec(config, source, hf_arch if archs else ENCODER_MODEL_TYPES[config["model_type"]])
    return _decoder_spec(config, source, hf_arch)


def _check_required(config: dict[str, Any], source: str) -> None:
    required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    missing = [key for key in required if key not in config]
    if missing:
        raise ModelNotFoundError(f"config.json of {source} lacks {', '.join(missing)}",
                                 "the checkpoint's config.json is incomplete: re-download or fix it")


def _encoder_kind(config: dict[str, Any], source: str, hf_arch: str) -> str:
    """EMBEDDING_KIND, or RERANK_KIND for a one-label sequence classifier of a family whose head we know."""
    if not hf_arch.endswith("ForSequenceClassification"):
        return EMBEDDING_KIND
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels", 2))
    if config["model_type"] not in RERANK_MODEL_TYPES or labels != 1:
        raise UnsupportedArchitectureError(
            f"{hf_arch} of {source} ({labels} label(s)) is not a cross-encoder edgeopt can serve for reranking",
            f"reranking takes one-label sequence classifiers of model_type {', '.join(RERANK_MODEL_TYPES)} "
            "(sentence-transformers' CrossEncoder with num_labels=1)")
    return RERANK_KIND


def _encoder_spec(config: dict[str, Any], source: str, hf_arch: str) -> ModelSpec:
    heads, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
    kind = _encoder_kind(config, source, hf_arch)
    mpnet = config["model_type"] == "mpnet"  # no token types; a relative-position bias table
    return ModelSpec(
        source=source, hf_architecture=hf_arch, arch=config["model_type"],
        vocab_size=int(config["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(config["intermediate_size"]), num_layers=int(config["num_hidden_layers"]),
        num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
        max_position_embeddings=int(config.get("max_position_embeddings", 512)),
        tie_word_embeddings=False, attention_bias=True, qk_norm=False, rope_theta=0.0,
        rms_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
        torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "float32"),
        kind=kind, type_vocab_size=int(config.get("type_vocab_size", 0 if mpnet else 2)),
        relative_attention_buckets=int(config.get("relative_attention_num_buckets", 32)) if mpnet else 0,
        has_pooler=hf_arch == ENCODER_MODEL_TYPES[config["model_type"]] or kind == RERANK_KIND,
    )


def _decoder_spec(config: dict[str, Any], source: str, hf_arch: str) -> ModelSpec:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    arch = SUPPORTED_ARCHITECTURES[hf_arch]
    head_dim = int(config.get("head_dim") or hidden // heads)
    rope_theta = config.get("rope_theta")
    if rope_theta is None:  # transformers >= 5 nests it under rope_parameters (per layer type for Gemma 3)
        params = config.get("rope_parameters") or {}
        rope_theta = params.get("full_attention", params).get("rope_theta", 10000.0)
    return ModelSpec(
        source=source,
        hf_architecture=hf_arch,
        arch=arch,
        vocab_size=int(config["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(config["intermediate_size"]),
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", arch in TIED_BY_DEFAULT)),
        # Qwen2 always has q/k/v biases; Llama-family models declare it with attention_bias.
        attention_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
        qk_norm=arch in ("qwen3", "gemma3"),
        rope_theta=float(rope_theta),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "float32"),
        # Phi-4-mini rotates 3/4 of each head (partial_rotary_factor 0.75); the rest passes through.
        rotary_dim=int(head_dim * float(config.get("partial_rotary_factor") or 1.0)),
        sandwich_norms=arch in SANDWICH_NORM_ARCHS,
    )


def reference_attention(model_dir: str | Path) -> dict[str, str]:
    """Extra ``from_pretrained`` arguments a checkpoint needs for transformers to compute it faithfully.

    Attention logit soft-capping (Gemma 2) exists only in transformers' eager attention: the default
    SDPA kernel silently skips it, giving logits the real model never produces. Every reference
    (evaluation, pruning, ONNX validation, the torch runtime) loads such models eagerly."""
    path = Path(model_dir) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("attn_logit_softcapping"):
        return {"attn_implementation": "eager"}
    return {}


def resolve_config_path(model: str) -> Path:
    """Local directory with config.json, or a hub id whose config.json is fetched (config only)."""
    path = Path(model).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ModelNotFoundError(f"{path} has no config.json", "point at a Hugging Face checkpoint directory")
        return cfg
    # A hub id is "owner/name"; anything that exists locally or looks like a path is a local miss.
    looks_local = path.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1 or path.parent.is_dir()
    if looks_local:
        raise ModelNotFoundError(
            f"model {model!r} is neither a checkpoint directory nor a hub id",
            "pass a local directory with config.json, or a hub id like Qwen/Qwen2.5-0.5B-Instruct",
        )
    from edgeopt.sources.hub import fetch_config

    return fetch_config(model)


def load_model_spec(model: str) -> ModelSpec:
    cfg = resolve_config_path(model)
    try:
        config = json.loads(cfg.read_text())
    except json.JSONDecodeError as exc:
        raise ModelNotFoundError(f"{cfg} is not valid JSON: {exc}", "re-download the checkpoint") from exc
    return spec_from_config(config, model)
