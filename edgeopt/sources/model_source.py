"""What ``edgeopt serve`` / ``inspect`` / ``plan`` are pointed at: a bundle directory, or a GGUF model file
served where it lies (edgeopt.sources.gguf_model builds its manifest from the file's metadata)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.store.bundle import Manifest, load_bundle
from edgeopt.errors import BundleError
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.sources.gguf_model import gguf_manifest, gguf_metadata
from edgeopt.sources.architectures import SUPPORTED_ARCHITECTURES


@dataclass(frozen=True)
class ModelSource:
    bundle_dir: Path  # where manifest.model_file lives
    manifest: Manifest
    names: tuple[str, ...]  # the model id clients use first, then accepted aliases
    is_file: bool  # a bare GGUF file (no manifest on disk, nothing to verify)


def open_model_source(path: Path | str, verify: bool = True) -> ModelSource:
    path = Path(path)
    if is_gguf_file(path):
        manifest = gguf_manifest(path)
        names = (path.stem, manifest.export.get("gguf_name") or "")
        return ModelSource(path.parent, manifest, tuple(dict.fromkeys(n for n in names if n)), True)
    if path.is_file():
        with path.open("rb") as fh:
            start = fh.read(4)
        raise BundleError(f"{path} is a file but not a GGUF model (it starts with {start!r}, not b'GGUF')",
                          "pass a .gguf model file or a bundle directory written by edgeopt optimize / import")
    manifest = load_bundle(path, verify=verify)
    return ModelSource(path, manifest, bundle_model_names(path, manifest), False)


def bundle_model_names(bundle_dir: Path, manifest: Manifest) -> tuple[str, ...]:
    """The bundle's directory name is the model id; the source model's id is accepted as an alias."""
    names = [Path(bundle_dir).resolve().name, manifest.source_model]
    return tuple(dict.fromkeys(n for n in names if n))


def model_card(bundle_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """What APIs that describe a model show (Ollama's /api/tags and /api/show): format, quant, family
    (GGUF's short architecture name: "llama", "qwen2"), weight bytes, the model file's sha256 when the
    manifest has it, and the parameter count when the file says (GGUF)."""
    from edgeopt.sizing.bundle_facts import weights_bytes

    card: dict[str, Any] = {"format": manifest.format, "quant": manifest.quant,
                            "architecture": SUPPORTED_ARCHITECTURES.get(manifest.architecture, manifest.architecture),
                            "weights_bytes": weights_bytes(bundle_dir, manifest)}
    digest = manifest.files.get(manifest.model_file, {}).get("sha256")
    if digest:
        card["digest"] = f"sha256:{digest}"
    model_path = Path(bundle_dir) / manifest.model_file
    if manifest.format == "gguf" and is_gguf_file(model_path):
        meta = gguf_metadata(model_path)
        card.update(architecture=meta.architecture, parameters=meta.parameter_count)
    return card
