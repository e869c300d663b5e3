"""Turn the user's MODEL argument (local directory or hub id) into a local checkpoint directory."""

from __future__ import annotations

from pathlib import Path

from edgeopt.bundle import content_hash
from edgeopt.errors import MissingDependencyError, ModelNotFoundError


def resolve_model_dir(model: str) -> tuple[Path, str]:
    """Return (directory, revision). A local directory's revision is the hash of its contents."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} has no config.json", "point at a Hugging Face checkpoint directory")
        return path.resolve(), "sha256:" + content_hash(path)
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise MissingDependencyError("downloading a hub model needs huggingface_hub",
                                     "pip install 'edgeopt[optimize]'") from exc
    try:
        local = Path(snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.jinja"]))
    except Exception as exc:
        raise ModelNotFoundError(f"could not download {model!r}: {exc.__class__.__name__}: {exc}",
                                 "check the hub id and your network, or pass a local directory") from exc
    return local, local.name  # snapshot folders are named by commit hash
