"""Turn the user's MODEL argument (local directory or hub id) into a local checkpoint directory."""

from __future__ import annotations

from pathlib import Path

from edgeopt.store.bundle import content_hash
from edgeopt.errors import ModelNotFoundError


def resolve_model_dir(model: str) -> tuple[Path, str]:
    """Return (directory, revision). A local directory's revision is the hash of its contents."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json", "point at a Hugging Face checkpoint directory")
        return path.resolve(), "sha256:" + content_hash(path)
    from edgeopt.sources.hub import fetch_checkpoint

    local = fetch_checkpoint(model, ["*.json", "*.safetensors", "tokenizer*", "*.jinja"])
    return local, local.name  # snapshot folders are named by commit hash
