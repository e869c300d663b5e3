"""The engine's schedulers: the first one, and the fresh one that replaces a scheduler whose bookkeeping failed
(an engine bug: the engine thread contains it and goes on serving, edgeopt.engine.engine)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from edgeopt.engine.api import EngineConfig
from edgeopt.engine.prefix_cache_modes import prefix_cache_for
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.scheduler import Scheduler
from edgeopt.engine.speculation.setup import Speculation
from edgeopt.runtimes.base import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerFactory:
    runtime: Runtime
    config: EngineConfig
    requests: RequestRegistry
    context_tokens: int
    speculation: Speculation | None

    def new(self) -> Scheduler:
        """With a prefix cache in the runtime's storage mode when asked for and the runtime has cache slots."""
        info = self.runtime.info
        cache = prefix_cache_for(self.runtime, range(info.max_slots, info.max_slots + info.cache_slots),
                                 shares_cells=info.shares_kv_cells, enabled=self.config.prefix_cache)
        return Scheduler(self.config, self.runtime.release, self.requests, self.context_tokens, cache=cache,
                         speculation=self.speculation)

    def replace(self, broken: Scheduler, error: str) -> Scheduler:
        """A fresh scheduler over emptied runtime slots (the broken one's accounting may disagree with the
        runtime's KV); every request the broken one was given ends with "error"."""
        fresh = self.new()
        info = self.runtime.info
        for slot in [*range(self.config.max_running), *range(info.max_slots, info.max_slots + info.cache_slots)]:
            try:
                self.runtime.release(slot)
            except Exception:  # noqa: BLE001 - a runtime that cannot even release: later steps will say so
                log.exception("releasing runtime slot %d after a scheduling failure failed", slot)
        broken.abandon(error)
        return fresh
