"""What serving must know about a bundle's model before loading it (:class:`KvFacts`): weight bytes,
KV elements per token, the model's own context window and its runtime's overhead.

These are a few numbers, and they are read from the manifest (its ``kv`` section, which ``edgeopt
optimize`` writes for every causal LM: :mod:`edgeopt.sizing.manifest_section`) or, for bundles written
before it did, computed from the model's ``config.json`` that every bundle carries, with the planner's
formula. Never from the model
file: a GGUF header holds the whole vocabulary, and parsing 150k token strings and merges in Python
took most of a 30 s cold start. llama.cpp reads the file once, when the runtime loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.errors import BundleError, EdgeoptError
from edgeopt.sources.gguf_model import gguf_metadata, gguf_model_spec, is_gguf_only
from edgeopt.sizing.budget import KvFacts, kv_bytes_per_token, memory_pool, model_kv_facts, require_kv_room
from edgeopt.sizing.kv_types import kv_element_bytes_for
from edgeopt.sizing.manifest_section import KvSection, legacy_kv_type, legacy_partial_facts
from edgeopt.sizing.shape import (ServingShape, ShapeRequest, check_shape_request, decide_serving_shape,
                                  refuse_context_past_window, served_kv_type)
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.sources.model_spec import ModelSpec, spec_from_config


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


def bundle_serving_shape(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, memory_bytes: int | None = None,
                         target: str | DeviceProfile = "host") -> ServingShape:
    """The shape ``edgeopt serve`` starts a causal-LM bundle with: :func:`edgeopt.sizing.shape.decide_serving_shape`
    (the planner's function) on the planner's memory pool (``memory_bytes``, else profile ``target``'s), from
    the manifest's recorded facts. What serving refuses and planning only reports is refused here: a flag the
    bundle's runtime lacks (before the bundle is read further), a ``--context`` past the model's window, and a
    memory that holds not even two KV tokens (with the numbers)."""
    shape = planned_bundle_shape(bundle_dir, manifest, request, memory_bytes, target)
    require_kv_room(shape.sizing)
    return shape


def planned_bundle_shape(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, memory_bytes: int | None = None,
                         target: str | DeviceProfile = "host") -> ServingShape:
    """What :func:`bundle_serving_shape` decides, without refusing a memory too small for the KV cache:
    ``edgeopt plan BUNDLE`` reports that ("fits: no") where ``edgeopt serve`` refuses to start."""
    entry = backends.backend(manifest.format)
    check_shape_request(entry, request)
    profile = None if memory_bytes is not None else target if isinstance(target, DeviceProfile) else load_profile(target)
    facts = bundle_kv_facts(bundle_dir, manifest)
    refuse_context_past_window(request, facts.context_length)
    return decide_serving_shape(entry, manifest.quant, facts,
                                memory_pool(profile, memory_bytes), request,
                                recorded_kv_type(manifest))


def bundle_kv_facts(bundle_dir: Path, manifest: Manifest) -> KvFacts:
    """The sizing facts of a causal-LM bundle: KV shape from the manifest (else config.json), the runtime's
    memory from the model's vocabulary and width in config.json."""
    section = recorded_kv_section(Path(bundle_dir), manifest)
    spec = bundle_model_spec(Path(bundle_dir), manifest)
    return model_kv_facts(backends.backend(manifest.format), vocab_size=spec.vocab_size,
                          intermediate_size=spec.intermediate_size, weights_bytes=weights_bytes(bundle_dir, manifest),
                          kv_elements_per_token=section.kv_elements_per_token, context_length=section.context_length,
                          hidden_size=spec.hidden_size, tied_embeddings=spec.tie_word_embeddings,
                          attention_heads=spec.num_heads)


def recorded_kv_section(bundle_dir: Path, manifest: Manifest) -> KvSection:
    """The manifest's ``kv`` section; for a bundle written before it existed, the loose export keys it kept
    then, completed from the bundle's config.json."""
    if manifest.kv is not None:
        return manifest.kv
    element_bytes = backends.backend(manifest.format).kv_element_bytes_for(manifest.quant)
    elements, context = legacy_partial_facts(manifest.export, element_bytes)
    if not (elements and context):
        spec = bundle_model_spec(bundle_dir, manifest)
        elements, context = elements or spec.kv_elements_per_token, context or spec.max_position_embeddings
    return KvSection(elements, context, legacy_kv_type(manifest.export))


def recorded_kv_type(manifest: Manifest) -> str | None:
    """The KV cache type ``edgeopt optimize`` chose for the bundle (None: none recorded, or a format with one)."""
    return manifest.kv.kv_type if manifest.kv is not None else legacy_kv_type(manifest.export)


def kv_shape(bundle_dir: Path, manifest: Manifest, kv_type: str | None = None) -> tuple[int, int]:
    """(KV bytes per token in ``kv_type``, default the bundle's served type; the model's context window)."""
    section = recorded_kv_section(Path(bundle_dir), manifest)
    entry = backends.backend(manifest.format)
    served = served_kv_type(entry, kv_type, section.kv_type)
    element_bytes = kv_element_bytes_for(manifest.format, manifest.quant, served)
    return kv_bytes_per_token(section.kv_elements_per_token, element_bytes), section.context_length


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
