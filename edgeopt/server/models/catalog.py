"""The models a server can serve, by name: what each needs in bytes and how to load it.

A model's name is its bundle directory's name or its GGUF file's stem; the source model's id is an alias.
Ollama's clients write ``name:tag`` (``smollm2:latest``): the tag is ignored when no model has that exact
name. With ``edgeopt serve --models DIR`` the folder is scanned again whenever the models are listed, so a
bundle copied in is servable without a restart (one removed disappears once it is not loaded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeopt.store.bundle import Manifest
from edgeopt.errors import ModelNameError
from edgeopt.server.served_model import ServedModel
from edgeopt.server.http.text_fields import quoted


@dataclass(frozen=True)
class ModelNeed:
    """Bytes of the budget a model takes once loaded (the process's own share counted once, by the server)."""

    full_bytes: int  # sized as the operator asked: every sequence's KV at the full context
    least_bytes: int  # never loaded smaller: weights, runtime buffers and one full-context sequence

    def __post_init__(self) -> None:
        if not 0 <= self.least_bytes <= self.full_bytes:
            raise ValueError(f"least_bytes {self.least_bytes} must lie in [0, full_bytes {self.full_bytes}]")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    kind: str  # manifest.kind: causal-lm, embedding, rerank
    need: ModelNeed
    # Loads the model within the bytes given (>= need.least_bytes; runs in a worker thread)
    load: Callable[[int], ServedModel] | None
    aliases: tuple[str, ...] = ()
    card: Mapping[str, Any] = field(default_factory=dict)  # what APIs that describe a model show (model_card)
    kv_labels: Mapping[str, str] = field(default_factory=dict)  # its KV cache's type and layout, for /metrics
    path: Path | None = None  # the bundle or GGUF file it comes from
    bundle_dir: Path | None = None  # where its manifest's model file lies (a GGUF file's folder)
    manifest: Manifest | None = None
    # Why it can never load on this server (it needs more than the whole budget), or None
    refusal: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


class ModelCatalog:
    """The servable models; ``scan`` (``--models DIR``) is called again each time the models are listed."""

    def __init__(self, entries: Iterable[ModelEntry], scan: Callable[[], list[ModelEntry]] | None = None) -> None:
        self._fixed = list(entries)
        self._scan = scan
        self._scanned: list[ModelEntry] = scan() if scan is not None else []
        if not self._fixed and not self._scanned:
            raise ModelNameError("no model to serve", "pass bundles or GGUF files, or a --models folder holding some")

    def entries(self) -> list[ModelEntry]:
        """Every servable model, first the ones named on the command line, then the folder's."""
        seen: set[str] = set()
        out = []
        for entry in [*self._fixed, *self._scanned]:
            if entry.name not in seen:
                seen.add(entry.name)
                out.append(entry)
        return out

    @property
    def default(self) -> ModelEntry:
        """The model of a request that names none (Ollama's embeddings alias, /tokenize): the first one."""
        return self.entries()[0]

    @property
    def several(self) -> bool:
        return self._scan is not None or len(self._fixed) > 1

    def rescan(self, keep: Callable[[str], bool] = lambda name: False) -> None:
        """Scan ``--models DIR`` again; a model gone from it stays listed while ``keep(name)`` (it is loaded)."""
        if self._scan is None:
            return
        found = self._scan()
        names = {entry.name for entry in found}
        self._scanned = found + [entry for entry in self._scanned if entry.name not in names and keep(entry.name)]

    def resolve(self, name: str | None) -> ModelEntry:
        """The model ``name`` means: a name or alias, else Ollama's ``name:tag`` without its tag, else the same
        name in another case; a 404 listing the names that exist otherwise."""
        entries = self.entries()
        if not name:
            return entries[0]
        for entry in entries:  # a name before an alias: two GGUF files of one model share its alias
            if name == entry.name:
                return entry
        for entry in entries:
            if name in entry.aliases:
                return entry
        base = name.rsplit(":", 1)[0]
        for entry in entries:
            if any(base == known.rsplit(":", 1)[0] or base.lower() == known.lower() for known in entry.names):
                return entry
        listed = ", ".join(repr(entry.name) for entry in entries)
        raise ModelNameError(f"model {quoted(name)} not found: this server serves {listed}",  # Ollama's words
                             "use one of them (GET /v1/models lists them); models are not downloaded here",
                             param="model")
