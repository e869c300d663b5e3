"""The engine of ``--runtime torch`` on CUDA: a continuous-batching manager that owns its own scheduler.

transformers' ``ContinuousBatchingManager`` schedules, keeps a paged KV cache and samples by itself, so
it cannot sit *behind* edgeopt's engine as a per-step :class:`edgeopt.runtimes.base.Runtime`. :class:`PagedEngine`
is an alternative :class:`~edgeopt.engine.api.ServingEngine` instead: the routes, streaming and metrics
are the same code, and the requests' lifecycle is the same object as in edgeopt's Engine
(:class:`~edgeopt.engine.registry.RequestRegistry`: streams, detokenizing, stop strings and stop token ids,
one final output per request). Only the part below is specific: a pump thread turns the manager's
cumulative results into our text deltas.

The manager is reached through the small :class:`BatchingManager` protocol, which
``edgeopt.paged_batching.paged_compat.TransformersManager`` implements over whichever transformers release is
installed; tests drive the engine with a fake manager on CPU. Nothing here imports torch.

Failures: a failed forward pass ends the requests it carried with finish_reason="error" (the server answers
500 or a final SSE error), never "abort" (which means the client left). A manager that stops without
reporting its requests ends them with "error" too, so no client waits forever.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from edgeopt.engine.api import SHARED_NAMESPACE, ActiveRequest, CachedPrefix, EngineConfig, EngineStats, SamplingParams
from edgeopt.engine.outputs import RequestTracker, describe_failure, engine_stopped_message
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.stream import RequestStream
from edgeopt.engine.validation import validate_request
from edgeopt.errors import BackendError
from edgeopt.runtimes.base import RuntimeInfo, Tokenizer

_RESULT_WAIT_S = 0.1  # the pump polls the manager's result queue; this bounds how long shutdown takes
_STOP_TIMEOUT_S = 30
T = TypeVar("T")


@dataclass(frozen=True)
class PagedResult:
    """One update of a request from the manager: everything generated so far (cumulative)."""

    request_id: str
    generated_tokens: list[int]
    finished: bool
    error: str | None = None  # the manager failed this request (its forward pass raised)


@dataclass(frozen=True)
class PagedUsage:
    running: int
    waiting: int
    kv_used_tokens: int
    steps: int


class BatchingManager(Protocol):
    """A continuous-batching generator with its own scheduler, paged KV cache and sampler."""

    def start(self) -> None: ...

    def stop(self, timeout_s: float) -> None: ...

    def is_running(self) -> bool: ...

    def check_supported(self, params: SamplingParams) -> None:
        """Raise RequestError (naming the parameter) for what this manager cannot honour."""
        ...

    def submit(self, request_id: str, prompt_ids: list[int], max_new_tokens: int, params: SamplingParams) -> None: ...

    def cancel(self, request_id: str) -> None: ...

    def next_result(self, timeout_s: float) -> PagedResult | None:
        """The next update of any request, or None when none came within ``timeout_s``."""
        ...

    def usage(self) -> PagedUsage: ...


class PagedEngine:
    def __init__(self, create_manager: Callable[[], BatchingManager], tokenizer: Tokenizer, info: RuntimeInfo,
                 config: EngineConfig) -> None:
        self.info, self.config = info, config
        self.context_tokens = min(config.context_length, config.kv_capacity_tokens, info.context_length)
        self._create_manager = create_manager
        self._requests = RequestRegistry(tokenizer, info.eos_token_ids)
        self._manager: BatchingManager | None = None
        self._pump: threading.Thread | None = None
        self._stopping = False
        self.failure: str | None = None  # why the manager or the pump died, if they did (for /health)

    @property
    def is_running(self) -> bool:
        """True while the manager generates and the pump delivers its results (a health check)."""
        return (self._manager is not None and self._manager.is_running() and self._pump is not None
                and self._pump.is_alive() and not self._stopping)

    def start(self) -> None:
        if self._manager is not None:
            raise BackendError("the paged engine is already started", "call start() once per engine")
        self._manager = self._create_manager()
        self._manager.start()
        self._pump = threading.Thread(target=self._pump_results, name="edgeopt-paged-pump", daemon=True)
        self._pump.start()

    def shutdown(self, close_runtime: bool = True) -> None:
        """Stop the manager and the pump; unfinished requests end with "abort". (The manager owns the model:
        there is no separate runtime to close.)"""
        self._stopping = True
        if self._manager is not None:
            self._manager.stop(timeout_s=_STOP_TIMEOUT_S)
        if self._pump is not None:
            self._pump.join(timeout=_STOP_TIMEOUT_S)
        self._requests.end_all("abort")

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    cache_namespace: str = SHARED_NAMESPACE) -> RequestStream:
        """``cache_namespace`` is accepted and has nothing to keep apart: this engine reuses no prefix across
        requests (transformers' manager shares no blocks between them)."""
        asyncio.get_running_loop()  # raises RuntimeError off an event loop: a caller bug
        validate_request(prompt_ids, params, self.info.vocab_size, self.context_tokens)
        manager = self._manager
        if manager is None or not self.is_running:
            raise BackendError(engine_stopped_message(self.failure) if self.failure else
                               "the paged engine is not running", "retry against a running server")
        manager.check_supported(params)
        tracker = self._requests.open(request_id, prompt_ids, params, on_close=self.abort)
        max_new = min(params.max_tokens, self.context_tokens - len(prompt_ids))
        try:
            manager.submit(request_id, prompt_ids, max_new, params)
        except BaseException:
            self._requests.forget(request_id)
            raise
        return tracker.stream

    def abort(self, request_id: str) -> None:
        tracker = self._requests.get(request_id)
        if tracker is None:
            return
        if self._manager is not None:
            self._manager.cancel(request_id)
        self._requests.end(tracker, "abort")
        self._requests.flush()

    def clear_prefix_cache(self) -> int:
        """transformers' continuous batching keeps no prefix cache here: nothing to evict."""
        return 0

    def adopt_prefix(self, tokens: list[int], fill: Callable[[int], bool], namespace: str = SHARED_NAMESPACE) -> bool:
        return False  # no prefix cache to adopt into

    def with_cached_prefix(self, tokens: list[int], use: Callable[[int], T],
                           namespace: str = SHARED_NAMESPACE) -> T | None:
        return None  # no prefix cache holds anything

    def cached_prefixes(self) -> list[CachedPrefix]:
        return []  # transformers' paged cache keeps no prefixes here: nothing to save on a swap

    def restore_prefix(self, tokens: list[int], fill: Callable[[int], bool], namespace: str = SHARED_NAMESPACE) -> bool:
        return False  # no prefix cache to restore into

    def stats(self) -> EngineStats:
        usage = self._manager.usage() if self._manager is not None else PagedUsage(0, 0, 0, 0)
        return EngineStats(running=usage.running, waiting=usage.waiting, kv_used_tokens=usage.kv_used_tokens,
                           kv_capacity_tokens=self.config.kv_capacity_tokens, preemptions_total=0,
                           steps_total=usage.steps, generated_tokens_total=self._requests.generated_tokens_total)

    def active_requests(self) -> list[ActiveRequest]:
        return self._requests.active_requests(state_of=_state_of)

    # --- the pump thread -------------------------------------------------------------------------

    def _pump_results(self) -> None:
        """Turn the manager's cumulative results into our text deltas until shutdown (or the manager dies)."""
        manager = self._manager
        assert manager is not None
        while not self._stopping:
            try:
                result = manager.next_result(timeout_s=_RESULT_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - the manager itself is broken: nothing more will come
                self._fail_everything(describe_failure(exc))
                return
            if result is None:
                if not self._stopping and not manager.is_running():
                    # Its thread is gone and its queue is drained: what is still open will never get a result.
                    self._fail_everything("the continuous-batching manager stopped")
                    return
                continue
            tracker = self._requests.get(result.request_id)
            if tracker is not None:
                try:
                    self._deliver(tracker, result)
                except Exception as exc:  # noqa: BLE001 - detokenizing one request must not stop the pump
                    manager.cancel(result.request_id)
                    self._requests.end(tracker, "error", describe_failure(exc))
            self._requests.flush()

    def _fail_everything(self, error: str) -> None:
        self.failure = error
        self._requests.end_all("error", error)

    def _deliver(self, tracker: RequestTracker, result: PagedResult) -> None:
        seq = tracker.seq
        if result.error:
            # The manager failed this request's step: an error, not a client abort (the server says 500).
            self._requests.end(tracker, "error", result.error)
            return
        for token in result.generated_tokens[len(seq.output_ids):]:
            output = self._requests.add_token(tracker, int(token), self.context_tokens)
            if output.finished and not result.finished:
                self._cancel(seq.request_id)  # a stop string or a stop id ended it before the manager did
            self._requests.emit(tracker, output)
            if output.finished:
                return
        if result.finished:
            self._requests.end(tracker, "length" if len(seq.output_ids) >= seq.params.max_tokens else "stop")

    def _cancel(self, request_id: str) -> None:
        assert self._manager is not None
        self._manager.cancel(request_id)


def _state_of(seq: Sequence) -> str:
    """The manager schedules; all we see of a request is whether it has produced a token yet."""
    return "decoding" if seq.output_ids else "prefilling"
