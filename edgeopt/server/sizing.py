"""What the launcher must know about a bundle's model before loading it: weight bytes, KV bytes/token.

For GGUF the numbers come from the file's own header (read with the ``gguf`` library, no model load);
other formats may record ``kv_bytes_per_token`` in ``manifest.export``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.bundle import Manifest
from edgeopt.errors import BundleError
from edgeopt.plan import KV_BYTES_PER_ELEMENT


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


def kv_shape(bundle_dir: Path, manifest: Manifest) -> tuple[int, int | None]:
    """(KV bytes per token, the model's training context or None when unknown)."""
    recorded = manifest.export.get("kv_bytes_per_token")
    if recorded:
        return int(recorded), manifest.export.get("context_length")
    if manifest.format == "gguf":
        return gguf_kv_shape(Path(bundle_dir) / manifest.model_file)
    raise BundleError(f"bundle format {manifest.format!r} does not record kv_bytes_per_token",
                      "re-run edgeopt optimize with this version")


def gguf_kv_shape(path: Path) -> tuple[int, int | None]:
    """2 (K and V) x layers x KV heads x head dim x f16 bytes, and the training context, from the header."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path), "r")
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path} is not a readable GGUF file: {exc}", "copy the bundle again") from exc
    fields = {name: _field_value(field) for name, field in reader.fields.items()}
    arch = fields.get("general.architecture")
    try:
        layers = int(fields[f"{arch}.block_count"])
        heads = int(fields[f"{arch}.attention.head_count"])
        kv_heads = int(fields.get(f"{arch}.attention.head_count_kv", heads))
        default_dim = int(fields[f"{arch}.embedding_length"]) // heads
        key_len = int(fields.get(f"{arch}.attention.key_length", default_dim))
        value_len = int(fields.get(f"{arch}.attention.value_length", default_dim))
    except KeyError as exc:
        raise BundleError(f"{path} lacks GGUF header key {exc} for architecture {arch!r}",
                          "re-export the model with edgeopt optimize --format gguf") from exc
    context = fields.get(f"{arch}.context_length")
    return layers * kv_heads * (key_len + value_len) * KV_BYTES_PER_ELEMENT["gguf"], int(context) if context else None


def _field_value(field: Any) -> Any:
    if hasattr(field, "contents"):
        try:
            return field.contents()
        except (ValueError, IndexError, TypeError):
            return None
    if not field.data:
        return None
    part = field.parts[field.data[0]]
    return bytes(part).decode("utf-8", "replace") if part.dtype.kind == "u" and part.ndim == 1 and \
        len(field.types) == 1 and field.types[0].name == "STRING" else part[0]
