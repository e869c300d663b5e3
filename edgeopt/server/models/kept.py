"""Memory unloaded models leave behind on purpose, for a quick swap back: what the residency
(edgeopt.server.models.residency) counts in its budget and frees before it unloads a loaded model.

llama.cpp's implementation is runtimes/llama_cpp/kept_models.py: the model without its context, so a swap back
skips rebuilding the vocabulary's tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from edgeopt.server.models.catalog import ModelEntry


class KeptMemory(Protocol):
    """What unloaded models leave loaded for a swap back (runtimes/llama_cpp/kept_models.py): counted in the
    budget, freed before any loaded model is unloaded, except the file about to load, whose load takes it back."""

    def held_bytes(self, path: Path | None = None) -> int: ...
    def release_oldest(self, spare: Path | None = None) -> int: ...
    def release_all(self) -> None: ...


def model_file_of(entry: ModelEntry) -> Path | None:
    """The file ``entry``'s runtime loads (a kept model's key), where the entry says."""
    if entry.manifest is not None and entry.bundle_dir is not None:
        return (entry.bundle_dir / entry.manifest.model_file).resolve()
    return None
