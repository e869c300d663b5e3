"""Which models are loaded, within one memory budget: loaded by name when a request needs them, admitted by
bytes, unloaded least recently used first when another needs the room, or once idle past their keep-alive.

The rules (docs/many-models.md tells users the same):

- A model takes the bytes its entry's need says (``ModelNeed``; the process's own share is reserved once,
  by the launcher). It is loaded at its full size when the budget has that free, else at what is free when
  that is at least its least size (one full-context sequence), else idle models are unloaded, least
  recently used first, until it fits.
- A model with requests in flight (leases) is never unloaded, nor a pinned one (``--pin``); a request that
  finds every other model busy waits for one to finish (up to ``BUSY_WAIT_S``), then gets a 503.
- An idle model is unloaded ``keep_alive`` seconds after its last request (Ollama's request field or the
  server's ``--keep-alive``; 0 unloads when its requests finish, math.inf never).
- A load runs in a worker thread: requests to models already loaded never wait for it. A model whose load
  failed answers 503 naming the cause; the next request after ``RETRY_AFTER_FAILURE_S`` tries again.

Unloading hands the model's prefix cache to ``on_unload`` (the swap space) before closing it, and a load
hands the fresh model to ``on_load`` (which restores it). What an unloaded model leaves loaded for a swap back
(``kept``: llama.cpp's model without its context) counts in the budget and is freed before any loaded model is
unloaded, except the one about to load, which takes it back (edgeopt.server.models.kept).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edgeopt.errors import NotReadyError
from edgeopt.server.models.catalog import ModelCatalog, ModelEntry
from edgeopt.server.models.errors import ModelBusyError, ModelTooLargeError
from edgeopt.server.models.kept import KeptMemory, model_file_of
from edgeopt.server.models.keep_alive import DEFAULT_KEEP_ALIVE_S, FOREVER
from edgeopt.server.served_model import ServedModel
from edgeopt.runtimes.heap import return_freed_heap
from edgeopt.sizing.budget import MIB

log = logging.getLogger("edgeopt.server")
BUSY_WAIT_S = 120.0
RETRY_AFTER_FAILURE_S = 30.0
REAP_INTERVAL_S = 1.0


@dataclass
class Resident:
    """A loaded model and what decides when it may go."""

    entry: ModelEntry
    served: ServedModel
    bytes: int  # of the budget it holds
    loaded_at: float
    pinned: bool = False
    leases: int = 0
    last_used: float = field(default_factory=time.monotonic)
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S  # from its last request's release

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def expires_at(self) -> float:
        """Monotonic time it unloads when idle (math.inf: never)."""
        if self.pinned or self.leases or self.keep_alive_s == FOREVER:
            return math.inf
        return self.last_used + self.keep_alive_s


@dataclass
class ModelEvents:
    """What the residency tells the rest of the server (metrics, the swap space); each runs in a worker thread
    except ``counted``."""

    on_load: Callable[[Resident], None] = lambda resident: None  # after a load, before the first request
    on_unload: Callable[[Resident], None] = lambda resident: None  # before the model is closed
    counted: Callable[[str, str], None] = lambda model, event: None  # ("loads"|"unloads"|"load_failures", model)


class Lease:
    """A request's hold on a loaded model: while held, the model is not unloaded."""

    def __init__(self, residency: Residency, resident: Resident) -> None:
        self._residency = residency
        self.resident = resident
        self.keep_alive_s: float | None = None  # the request's own keep_alive (Ollama); None: the server's
        self._released = False

    @property
    def served(self) -> ServedModel:
        return self.resident.served

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._residency.release(self)


class Residency:
    def __init__(self, catalog: ModelCatalog, budget_bytes: int, keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
                 pins: frozenset[str] = frozenset(), events: ModelEvents | None = None,
                 kept: KeptMemory | None = None) -> None:
        self.catalog = catalog
        self.budget_bytes = budget_bytes  # what the loaded models' needs may sum to
        self.keep_alive_s = keep_alive_s
        self.pins = pins
        self.events = events or ModelEvents()
        self.kept = kept
        self.loaded: dict[str, Resident] = {}
        self.failures: dict[str, tuple[str, float]] = {}  # name -> (why, monotonic time)
        self._decide = asyncio.Lock()  # one load or unload decision at a time
        self._released = asyncio.Event()  # set when a lease ends: a waiting load may find room
        self._reaper: asyncio.Task[None] | None = None

    # --- what requests use ---------------------------------------------------------------------------

    async def acquire(self, entry: ModelEntry) -> Lease:
        """A lease on ``entry``'s model, loading it (and making room) first if it is not loaded."""
        resident = self.loaded.get(entry.name)
        if resident is None:
            resident = await self._load_for_request(entry)
        resident.leases += 1
        resident.last_used = time.monotonic()
        return Lease(self, resident)

    def release(self, lease: Lease) -> None:
        resident = lease.resident
        resident.leases -= 1
        resident.last_used = time.monotonic()
        if lease.keep_alive_s is not None:
            resident.keep_alive_s = lease.keep_alive_s
        self._released.set()
        if resident.leases == 0 and resident.expires_at <= resident.last_used:  # keep_alive 0
            asyncio.get_running_loop().create_task(self.unload(resident.name, "keep_alive 0"))

    @property
    def used_bytes(self) -> int:
        kept = self.kept.held_bytes() if self.kept is not None else 0
        return kept + sum(resident.bytes for resident in self.loaded.values())

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - self.used_bytes

    # --- loading ---------------------------------------------------------------------------------------

    async def load(self, entry: ModelEntry, pinned: bool = False) -> Resident:
        """Load ``entry`` (at start for pinned models, or POST /models/load); a no-op when it is loaded."""
        async with self._decide:
            resident = self.loaded.get(entry.name) or await self._make_room_and_load(entry, wait=False)
        resident.pinned = resident.pinned or pinned
        return resident

    async def _load_for_request(self, entry: ModelEntry) -> Resident:
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            self._released.clear()
            async with self._decide:
                resident = self.loaded.get(entry.name)
                if resident is not None:
                    return resident
                self._check_failure(entry)
                resident = await self._make_room_and_load(entry, wait=True)
                if resident is not None:
                    return resident
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotReadyError(f"model {entry.name!r} needs {entry.need.least_bytes / MIB:.0f} MiB and every "
                                    f"loaded model is busy ({self._describe_loaded()})",
                                    "retry when their requests finish, or give edgeopt serve a larger --memory")
            try:
                await asyncio.wait_for(self._released.wait(), timeout=left)
            except asyncio.TimeoutError:
                pass

    async def _make_room_and_load(self, entry: ModelEntry, wait: bool) -> Resident | None:
        """Unload idle models until ``entry`` fits, then load it; None when only busy models stand in the way
        (``wait``), a 503 otherwise."""
        if entry.refusal:
            raise ModelTooLargeError(entry.refusal, "serve it with a larger --memory, or a smaller quantization of it",
                                     param="model")
        if entry.load is None:
            raise NotReadyError(f"model {entry.name!r} cannot be loaded again", "restart the server")
        need, model_file = entry.need, model_file_of(entry)
        own = self.kept.held_bytes(model_file) if self.kept is not None and model_file is not None else 0
        while self.free_bytes + own < need.least_bytes:  # its kept model's bytes are its own again once it loads
            if self.kept is not None and await asyncio.to_thread(self.kept.release_oldest, model_file):
                await asyncio.to_thread(return_freed_heap)
                continue
            victim = self._least_recently_used_idle()
            if victim is None:
                if wait:
                    return None
                raise NotReadyError(f"model {entry.name!r} needs {need.least_bytes / MIB:.0f} MiB; "
                                    f"{self.free_bytes / MIB:.0f} MiB are free and the loaded models are busy or "
                                    f"pinned ({self._describe_loaded()})", "unload one (POST /models/unload) or retry")
            await self._unload(victim, "room for " + entry.name)
        return await self._load(entry, min(need.full_bytes, self.free_bytes + own))

    async def _load(self, entry: ModelEntry, room: int) -> Resident:
        started = time.monotonic()
        log.info("loading model %s in %.0f MiB (%.0f MiB of %.0f MiB in use)", entry.name, room / MIB,
                 self.used_bytes / MIB, self.budget_bytes / MIB)
        try:
            served = await asyncio.to_thread(entry.load, room)
        except Exception as exc:  # noqa: BLE001 - a failed load is this model's 503, the others keep serving
            self.failures[entry.name] = (str(exc), time.monotonic())
            self.events.counted(entry.name, "load_failures")
            log.error("model %s failed to load: %s", entry.name, exc)
            raise NotReadyError(f"model {entry.name!r} failed to load: {exc}", "see the server log; the other models "
                                "keep serving") from exc
        self.failures.pop(entry.name, None)
        served.name = entry.name
        resident = Resident(entry, served, room, time.monotonic(), pinned=entry.name in self.pins,
                            keep_alive_s=self.keep_alive_s)
        try:
            await asyncio.to_thread(self.events.on_load, resident)
        except Exception:  # noqa: BLE001 - a cache not restored costs a prefill, never the model
            log.exception("model %s: restoring its saved state failed; serving it without", entry.name)
        self.loaded[entry.name] = resident
        self.events.counted(entry.name, "loads")
        log.info("model %s loaded in %.1f s", entry.name, time.monotonic() - started)
        try:  # /health answers 200 from here: background work the load deferred may start (Runtime.after_ready)
            served.after_ready()
        except Exception:  # noqa: BLE001 - deferred work is never worth the model
            log.exception("model %s: starting its deferred background work failed", entry.name)
        return resident

    def _check_failure(self, entry: ModelEntry) -> None:
        failure = self.failures.get(entry.name)
        if failure is not None and time.monotonic() - failure[1] < RETRY_AFTER_FAILURE_S:
            raise NotReadyError(f"model {entry.name!r} failed to load: {failure[0]}",
                                f"fix the cause in the server log; it is tried again {RETRY_AFTER_FAILURE_S:.0f} s "
                                "after the failure, or at once with POST /models/load")

    # --- unloading -------------------------------------------------------------------------------------

    async def unload(self, name: str, reason: str) -> bool:
        """Unload ``name`` if it is loaded and idle; False when it is not loaded. A model with requests in
        flight is refused (RequestError 409), never unloaded under them."""
        async with self._decide:
            resident = self.loaded.get(name)
            if resident is None:
                return False
            if resident.leases:
                raise ModelBusyError(f"model {name!r} has {resident.leases} request(s) in flight",
                                     "unload it when they finish (GET /api/ps shows it), or let keep-alive do it")
            await self._unload(resident, reason)
            return True

    async def _unload(self, resident: Resident, reason: str) -> None:
        del self.loaded[resident.name]  # before any await: no new request can lease it now
        log.info("unloading model %s (%s; %.0f MiB)", resident.name, reason, resident.bytes / MIB)
        try:
            await asyncio.to_thread(self.events.on_unload, resident)
        except Exception:  # noqa: BLE001 - a cache not saved costs a prefill later, never the unload
            log.exception("model %s: saving its prefix cache failed", resident.name)
        await asyncio.to_thread(resident.served.close)
        # llama.cpp's tables (Gemma 3's vocabulary: 37 MiB) lie mid-heap, where glibc never trims on its own: the
        # process kept them resident under the next model (measured: 78 MiB returned)
        await asyncio.to_thread(return_freed_heap)
        self.events.counted(resident.name, "unloads")

    def _least_recently_used_idle(self) -> Resident | None:
        idle = [r for r in self.loaded.values() if not r.leases and not r.pinned]
        return min(idle, key=lambda r: r.last_used, default=None)

    def _describe_loaded(self) -> str:
        return ", ".join(f"{r.name}: {r.bytes / MIB:.0f} MiB, {r.leases} in flight{', pinned' if r.pinned else ''}"
                         for r in self.loaded.values()) or "none"

    # --- the server's lifetime -------------------------------------------------------------------------

    def start(self) -> None:
        """Unload idle models past their keep-alive, every REAP_INTERVAL_S (needs the running loop)."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            now = time.monotonic()
            for resident in [r for r in self.loaded.values() if r.expires_at <= now]:
                try:
                    await self.unload(resident.name, f"idle for {now - resident.last_used:.0f} s")
                except Exception:  # noqa: BLE001 - leased again meanwhile, or a close that failed
                    log.debug("keep-alive unload of %s skipped", resident.name, exc_info=True)

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        for resident in list(self.loaded.values()):
            del self.loaded[resident.name]
            await asyncio.to_thread(resident.served.close)
        if self.kept is not None:
            self.kept.release_all()

