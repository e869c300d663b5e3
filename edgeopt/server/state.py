"""What one running server holds: its settings, its models (edgeopt.server.models) and its metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeopt.engine.api import EngineStats
from edgeopt.engine.outputs import engine_stopped_message
from edgeopt.errors import NotReadyError
from edgeopt.server.metrics import ServerMetrics
from edgeopt.server.models.kinds import check_use
from edgeopt.server.models.leases import hold
from edgeopt.server.models.residency import Residency
from edgeopt.server.models.stats import summed_stats
from edgeopt.server.batching.prompt_worker import PromptWorker
from edgeopt.server.served_model import ServedModel

__all__ = ["ServedModel", "ServerSettings", "ServerState"]  # ServedModel: where callers have always found it

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_STORE_BYTES = 32 * 1024 * 1024  # edgeopt serve --responses-store (its default: 32MiB)


@dataclass(frozen=True)
class ServerSettings:
    # The one model of a server started with one (create_app builds its catalog from these four and
    # model_card; a server of several models gives create_app its catalog instead)
    model_names: tuple[str, ...] = ()  # first: the id /v1/models shows; the others are accepted aliases
    kind: str = "causal-lm"  # manifest.kind
    api_key: str | None = None  # --api-key: one tenant behind a key (edgeopt.server.http.callers has the rule)
    api_keys: Mapping[str, str] = field(default_factory=dict)  # --api-keys: caller name -> key
    admin_key: str | None = None  # --admin-key: sees request ids, empties the prefix cache
    memory_budget_bytes: int = 0
    # A request body is parsed in memory before anything else can refuse it; cap it.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # False (default): control-token text inside chat messages is tokenized as plain text, so a user
    # cannot forge a system turn; True restores the old behaviour (edgeopt serve --parse-special-in-content).
    parse_special_in_content: bool = False
    # The KV cache the launcher chose (shown in /metrics as edgeopt_kv_cache_info): its element type
    # (edgeopt.sizing.kv_types) and, where the runtime has a choice (llama.cpp), its layout; None: not known.
    kv_type: str | None = None
    kv_layout: str | None = None
    # What the model is, for APIs that describe it (Ollama's /api/tags, /api/show): format, quant,
    # architecture, weights_bytes, digest (sha256 of the model file), parameters; {}: unknown.
    model_card: Mapping[str, Any] = field(default_factory=dict)
    # Bytes of stored /v1/responses kept for previous_response_id and GET (edgeopt.server.responses.store).
    responses_store_bytes: int = DEFAULT_STORE_BYTES

    @property
    def has_keys(self) -> bool:
        return bool(self.api_key or self.api_keys or self.admin_key)

    @property
    def kv_labels(self) -> dict[str, str]:
        return {name: value for name, value in (("kv_type", self.kv_type), ("layout", self.kv_layout)) if value}


class ServerState:
    """The server's settings, its models (``models``: which are loaded, within the budget), its metrics, and
    what faces keep for its lifetime."""

    def __init__(self, settings: ServerSettings, models: Residency) -> None:
        self.settings = settings
        self.models = models
        self.created = int(time.time())
        self.metrics = ServerMetrics(self.engine_stats, settings.memory_budget_bytes, settings.kv_labels)
        self.prompt_worker = PromptWorker()  # rendering and tokenizing, off the event loop
        # What a face keeps for the server's lifetime, under its own key (the Responses store)
        self.face_state: dict[str, object] = {}

    @property
    def model_id(self) -> str:
        """The model of a request that names none: the first one served."""
        return self.models.catalog.default.name

    @property
    def several_models(self) -> bool:
        return self.models.catalog.several

    async def model(self, name: str | None, use: str | None = None, keep_alive_s: float | None = None) -> ServedModel:
        """The model a request names, loaded and held for the request's lifetime (edgeopt.server.models.leases).

        ``use`` ("generation", "embedding", "rerank"): refuse a model of another kind with the names that do it.
        ``keep_alive_s``: how long it stays loaded once idle (Ollama's keep_alive); None: the server's."""
        entry = self.models.catalog.resolve(name)
        if use is not None:
            check_use(entry, use, self.models.catalog)
        if not self.several_models and entry.name not in self.models.loaded:  # loaded at start, or never
            failure = self.models.failures.get(entry.name)
            if failure is not None:
                raise NotReadyError(f"the model failed to load: {failure[0]}", "see the server log")
            raise NotReadyError("the model is still loading", "retry when GET /health returns 200")
        lease = await self.models.acquire(entry)
        lease.keep_alive_s = keep_alive_s
        hold(lease)
        problem = engine_problem(lease.served)
        if problem is not None:
            raise NotReadyError(f"model {entry.name!r}: {problem}", "restart the server; the cause is in its log")
        return lease.served

    @property
    def served(self) -> ServedModel | None:
        """The first model, once loaded (a server of one model: its model)."""
        resident = self.models.loaded.get(self.model_id)
        return resident.served if resident is not None else None

    def model_name(self, name: str | None) -> str:
        """The served model's own name for what a request wrote (an alias, Ollama's name:tag)."""
        return self.models.catalog.resolve(name).name

    def loaded(self) -> list[ServedModel]:
        return [resident.served for resident in self.models.loaded.values()]

    def engine_stats(self) -> EngineStats | None:
        """Every loaded model's engine figures, summed (per model: edgeopt.server.models.metrics)."""
        return summed_stats([served.engine.stats() for served in self.loaded() if served.engine is not None])


def engine_problem(served: ServedModel) -> str | None:
    """Why a loaded model cannot generate (its engine thread is gone), or None when it can."""
    engine = served.engine
    if engine is None or engine.is_running:
        return None
    return engine_stopped_message(engine.failure)
