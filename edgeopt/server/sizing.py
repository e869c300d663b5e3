"""What the launcher must know about a bundle's model before loading it: weight bytes, KV bytes/token
and the model's own context window.

These are a few numbers, and they are read from the manifest (``manifest.export``: ``edgeopt
optimize`` records them for every causal LM) or, for bundles written before it did, computed from the
model's ``config.json`` that every bundle carries, with the planner's formula. Never from the model
file: a GGUF header holds the whole vocabulary, and parsing 150k token strings and merges in Python
took most of a 30 s cold start. llama.cpp reads the file once, when the runtime loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.bundle import Manifest
from edgeopt.errors import BundleError, EdgeoptError
from edgeopt.model_spec import ModelSpec, spec_from_config
from edgeopt.memory_budget import kv_facts


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


def kv_shape(bundle_dir: Path, manifest: Manifest) -> tuple[int, int]:
    """(KV bytes per token, the model's context window): the manifest's, else from the bundle's config.json."""
    facts = {key: manifest.export.get(key) for key in ("kv_bytes_per_token", "context_length")}
    if not all(facts.values()):  # a bundle written before the manifest recorded both
        derived = kv_facts(bundle_model_spec(Path(bundle_dir), manifest), manifest.format)
        facts = {key: facts[key] or derived[key] for key in facts}
    return int(facts["kv_bytes_per_token"]), int(facts["context_length"])


def bundle_model_spec(bundle_dir: Path, manifest: Manifest) -> ModelSpec:
    """The ModelSpec of the bundle's model, from the config.json it carries (beside the tokenizer, and
    beside the model files for ONNX and torch bundles)."""
    model_path = bundle_dir / manifest.model_file
    candidates = (bundle_dir / manifest.tokenizer_dir / "config.json", model_path / "config.json",
                  model_path.parent / "config.json")
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise BundleError(f"{bundle_dir} records no kv_bytes_per_token/context_length and has no config.json",
                          "re-run edgeopt optimize with this version")
    try:
        return spec_from_config(json.loads(path.read_text()), str(path))
    except (json.JSONDecodeError, EdgeoptError) as exc:
        raise BundleError(f"{path} cannot size the KV cache: {exc}", "re-run edgeopt optimize with this version") \
            from exc
