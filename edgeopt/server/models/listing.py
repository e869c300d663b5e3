"""Each servable model's state, for the routes that list models (/v1/models, Ollama's /api/tags and /api/ps,
llama-server's /models, /health with several models). Listing scans ``--models DIR`` again."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from edgeopt.server.models.catalog import ModelEntry
from edgeopt.server.models.residency import Resident, RETRY_AFTER_FAILURE_S
from edgeopt.server.state import ServerState


@dataclass(frozen=True)
class ModelRow:
    entry: ModelEntry
    resident: Resident | None
    state: str  # loaded, unloaded, failed, too_large

    @property
    def name(self) -> str:
        return self.entry.name

    def expires_in_s(self) -> float:
        """Seconds until it unloads when idle (math.inf: never; 0: not loaded)."""
        if self.resident is None:
            return 0.0
        expires = self.resident.expires_at
        return math.inf if expires == math.inf else max(0.0, expires - time.monotonic())


def model_rows(state: ServerState) -> list[ModelRow]:
    models = state.models
    models.catalog.rescan(keep=lambda name: name in models.loaded)
    rows = []
    for entry in models.catalog.entries():
        resident = models.loaded.get(entry.name)
        failure = models.failures.get(entry.name)
        if resident is not None:
            label = "loaded"
        elif entry.refusal:
            label = "too_large"
        elif failure is not None and time.monotonic() - failure[1] < RETRY_AFTER_FAILURE_S:
            label = "failed"
        else:
            label = "unloaded"
        rows.append(ModelRow(entry, resident, label))
    return rows
