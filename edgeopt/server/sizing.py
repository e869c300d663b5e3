"""What the launcher must know about a bundle's model before loading it (:class:`KvFacts`): weight bytes,
KV elements per token, the model's own context window and its runtime's overhead.

These are a few numbers, and they are read from the manifest (``manifest.export``: ``edgeopt
optimize`` records them for every causal LM) or, for bundles written before it did, computed from the
model's ``config.json`` that every bundle carries, with the planner's formula. Never from the model
file: a GGUF header holds the whole vocabulary, and parsing 150k token strings and merges in Python
took most of a 30 s cold start. llama.cpp reads the file once, when the runtime loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt import backends
from edgeopt.bundle import Manifest
from edgeopt.errors import BundleError, EdgeoptError
from edgeopt.gguf_model import gguf_metadata, gguf_model_spec, is_gguf_only
from edgeopt.kv_types import kv_element_bytes_for, parse_kv_type
from edgeopt.memory_budget import KvFacts, kv_bytes_per_token, model_kv_facts
from edgeopt.model_spec import ModelSpec, spec_from_config


def weights_bytes(bundle_dir: Path, manifest: Manifest) -> int:
    """Bytes of the model file(s): everything in the bundle except the tokenizer directory."""
    tok_prefix = manifest.tokenizer_dir.rstrip("/") + "/"
    sizes = [info["bytes"] for rel, info in manifest.files.items() if not rel.startswith(tok_prefix)]
    if sizes:
        return int(sum(sizes))
    path = Path(bundle_dir) / manifest.model_file
    if not path.exists():
        raise BundleError(f"model file {path} is missing", "copy the whole bundle directory again")
    return path.stat().st_size


def bundle_kv_facts(bundle_dir: Path, manifest: Manifest) -> KvFacts:
    """The sizing facts of a causal-LM bundle: KV shape from the manifest (else config.json), the runtime's
    memory from the model's vocabulary and width in config.json."""
    elements, context = kv_elements_and_context(Path(bundle_dir), manifest)
    spec = bundle_model_spec(Path(bundle_dir), manifest)
    return model_kv_facts(backends.backend(manifest.format), spec, weights_bytes(bundle_dir, manifest), elements,
                          context)


def kv_elements_and_context(bundle_dir: Path, manifest: Manifest) -> tuple[int, int]:
    export = manifest.export
    elements, context = export.get("kv_elements_per_token"), export.get("context_length")
    recorded_bytes = export.get("kv_bytes_per_token")
    if not elements and recorded_bytes:  # a manifest written before it recorded elements: at the format's KV type
        elements = round(recorded_bytes / backends.backend(manifest.format).kv_element_bytes_for(manifest.quant))
    if not (elements and context):  # a bundle written before the manifest recorded both
        spec = bundle_model_spec(bundle_dir, manifest)
        elements, context = elements or spec.kv_elements_per_token, context or spec.max_position_embeddings
    return int(elements), int(context)


def served_kv_type(manifest: Manifest, asked: str | None = None) -> str | None:
    """The KV cache type to serve with: ``asked`` (``serve --kv-type``, refused for formats with one fixed
    KV dtype), else the one ``edgeopt optimize`` recorded, else the format's default; None for a format
    whose runtime has no choice (ONNX, torch)."""
    if asked is not None:
        return parse_kv_type(asked, manifest.format)
    types = backends.backend(manifest.format).kv_cache_types
    return str(manifest.export.get("kv_type") or types[0]) if types else None


def served_kv_element_bytes(manifest: Manifest, kv_type: str | None) -> float:
    return kv_element_bytes_for(manifest.format, manifest.quant, kv_type)


def kv_shape(bundle_dir: Path, manifest: Manifest, kv_type: str | None = None) -> tuple[int, int]:
    """(KV bytes per token in ``kv_type``, default :func:`served_kv_type`; the model's context window)."""
    elements, context = kv_elements_and_context(Path(bundle_dir), manifest)
    element_bytes = served_kv_element_bytes(manifest, kv_type or served_kv_type(manifest))
    return kv_bytes_per_token(elements, element_bytes), context


def bundle_model_spec(bundle_dir: Path, manifest: Manifest) -> ModelSpec:
    """The ModelSpec of the bundle's model, from the config.json it carries (beside the tokenizer, and
    beside the model files for ONNX and torch bundles); a GGUF that came without one (served as a file, or
    bundled by ``edgeopt import``) from its own metadata."""
    model_path = bundle_dir / manifest.model_file
    candidates = (bundle_dir / manifest.tokenizer_dir / "config.json", model_path / "config.json",
                  model_path.parent / "config.json")
    if is_gguf_only(manifest):  # a GGUF without its checkpoint: its own metadata (never a config.json near it)
        return gguf_model_spec(gguf_metadata(model_path))
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise BundleError(f"{bundle_dir} has no config.json to size the model's KV cache and runtime memory from",
                          "re-run edgeopt optimize with this version")
    try:
        return spec_from_config(json.loads(path.read_text()), str(path))
    except (json.JSONDecodeError, EdgeoptError) as exc:
        raise BundleError(f"{path} cannot size the KV cache: {exc}", "re-run edgeopt optimize with this version") \
            from exc
