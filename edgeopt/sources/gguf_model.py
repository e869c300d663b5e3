"""A GGUF file nobody bundled (downloaded from a hub, written by llama.cpp's converter) as a served model:
the manifest and the model shape that ``edgeopt serve``, ``plan``, ``inspect`` and ``import`` need, from
the file's own metadata (edgeopt.sources.gguf_metadata: no vocabulary parsing, no config.json).

What a bundle records that a bare file cannot: source checkpoint and revision, the passes that made it,
quality figures against the original model. The manifest says so (``export.origin``, empty ``metrics``),
and ``edgeopt inspect`` prints that quality figures are absent. The tokenizer is the GGUF's own, run by
llama.cpp (runtimes/llama_cpp/tokenizer.py), so no tokenizer.json is needed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.errors import BundleError
from edgeopt.store.file_stamp import file_stamp
from edgeopt.sources.gguf_metadata import GgufMetadata, read_gguf_metadata
from edgeopt.sizing.budget import kv_bytes_per_token, kv_elements_per_token
from edgeopt.sizing.manifest_section import KvSection
from edgeopt.sources.architectures import SUPPORTED_ARCHITECTURES
from edgeopt.sources.model_spec import ModelSpec

GGUF_ORIGIN = "gguf-file"  # manifest.export["origin"] of a model made from a bare GGUF file
# GGUF architectures llama.cpp runs as sentence encoders (pooled embeddings, no KV cache, no generation).
_ENCODER_ARCHS = ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "modern-bert", "t5encoder")
_HF_NAMES = {short: hf for hf, short in reversed(list(SUPPORTED_ARCHITECTURES.items()))}  # first HF name wins


@functools.lru_cache(maxsize=8)
def _cached_metadata(path: str, size: int, mtime_ns: int) -> GgufMetadata:
    return read_gguf_metadata(Path(path))


def gguf_metadata(path: Path) -> GgufMetadata:
    """The file's metadata, read once per file version (serve reads it for the manifest and for sizing)."""
    return _cached_metadata(*file_stamp(Path(path)))


def _number(meta: GgufMetadata, name: str, reduce: Any = max) -> int | None:
    """``{arch}.{name}``: a scalar, or a per-layer array reduced (``max``, ``sum``); None when absent."""
    value = meta.arch_value(name)
    if value is None and f"{meta.architecture}.{name}" in meta.arrays:
        values = meta.array_numbers(f"{meta.architecture}.{name}")
        return int(reduce(values)) if values else None
    return None if value is None else int(value)


def gguf_kv_elements_per_token(meta: GgufMetadata) -> int:
    """K and V elements one token costs, as llama.cpp lays the cache out (key and value head sizes apart)."""
    layers = _require(meta, "block_count")
    heads = _require(meta, "attention.head_count")
    embedding = _require(meta, "embedding_length")
    head_k = _number(meta, "attention.key_length") or embedding // heads
    head_v = _number(meta, "attention.value_length") or embedding // heads
    per_layer_kv = meta.arrays.get(f"{meta.architecture}.attention.head_count_kv")
    if per_layer_kv is not None:  # e.g. OpenELM: KV heads differ by layer
        return sum(n * (head_k + head_v) for n in meta.array_numbers(f"{meta.architecture}.attention.head_count_kv"))
    kv_heads = _number(meta, "attention.head_count_kv") or heads
    return kv_elements_per_token(layers, kv_heads, head_k, head_v)


def gguf_model_spec(meta: GgufMetadata) -> ModelSpec:
    """The model's shape for sizing (weights are the file's size; vocabulary and width size the runtime)."""
    arch = meta.architecture
    heads = _require(meta, "attention.head_count")
    embedding = _require(meta, "embedding_length")
    kv_heads = _number(meta, "attention.head_count_kv") or heads
    vocab = _number(meta, "vocab_size") or meta.array_length("tokenizer.ggml.tokens")
    return ModelSpec(
        source=str(meta.path), hf_architecture=_HF_NAMES.get(arch, arch), arch=arch, vocab_size=vocab,
        hidden_size=embedding, intermediate_size=_number(meta, "feed_forward_length") or 4 * embedding,
        num_layers=_require(meta, "block_count"), num_heads=heads, num_kv_heads=kv_heads,
        head_dim=_number(meta, "attention.key_length") or embedding // heads,
        max_position_embeddings=_require(meta, "context_length"),
        tie_word_embeddings=False, attention_bias=False, qk_norm=False,
        rope_theta=float(meta.arch_value("rope.freq_base", 10000.0)),
        rms_norm_eps=float(meta.arch_value("attention.layer_norm_rms_epsilon", 1e-6)), torch_dtype="unknown",
    )


def _require(meta: GgufMetadata, name: str) -> int:
    value = _number(meta, name)
    if value is None or value <= 0:
        raise BundleError(f"{meta.path} lacks {meta.architecture}.{name} in its metadata, which serving needs",
                          "convert the model again with a current llama.cpp (convert_hf_to_gguf.py)")
    return value


def gguf_manifest(path: Path, model_file: str | None = None) -> Manifest:
    """A manifest describing the GGUF at ``path`` (``model_file``: its name inside a bundle, default the
    file's own name, for serving it where it lies). Files are not hashed here: ``edgeopt import`` does."""
    path = Path(path)
    meta = gguf_metadata(path)
    arch = meta.architecture
    if arch in _ENCODER_ARCHS or meta.arch_value("pooling_type") is not None:
        raise BundleError(f"{path} is a {arch} encoder (sentence embeddings); serving a GGUF file directly covers "
                          "language models", "export the encoder with edgeopt optimize --format onnx")
    template = meta.get("tokenizer.chat_template")
    elements = gguf_kv_elements_per_token(meta)
    return Manifest(
        source_model=path.stem, source_revision="unhashed GGUF file", target="host", format="gguf",
        quant=meta.file_type, runtime="llama_cpp", model_file=model_file or path.name,
        architecture=_HF_NAMES.get(arch, arch), chat_template=template if isinstance(template, str) else None,
        export={"origin": GGUF_ORIGIN, "special_tokens": _special_tokens(meta),
                "gguf_name": meta.get("general.name") or ""},
        kv=KvSection(kv_elements_per_token=elements, context_length=_require(meta, "context_length"),
                     kv_bytes_per_token=kv_bytes_per_token(elements, backends.backend("gguf").memory.kv_element_bytes)),
    )


def _special_tokens(meta: GgufMetadata) -> dict[str, str]:
    """The BOS/EOS texts chat templates write (``{{ bos_token }}``), looked up in the vocabulary by id."""
    out = {}
    for name in ("bos", "eos"):
        token_id = meta.get(f"tokenizer.ggml.{name}_token_id")
        text = meta.array_string("tokenizer.ggml.tokens", token_id) if isinstance(token_id, int) else None
        if text is not None:
            out[f"{name}_token"] = text
    return out


def is_gguf_only(manifest: Manifest) -> bool:
    """A model served from a GGUF file's metadata (directly, or a bundle ``edgeopt import`` wrote)."""
    return manifest.export.get("origin") == GGUF_ORIGIN
