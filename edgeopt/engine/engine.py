"""The engine: a daemon thread that turns queued requests into batched runtime steps and streams text.

Threads: ``add_request`` / ``abort`` run on the server's event loop and only append to an inbox (no lock
is ever held across a decode, so the loop never blocks on the model). The engine thread owns the
scheduler, the sequences and the runtime; it drains the inbox and runs steps. A step is three parts
around the runtime's forward pass, run in this order: the scheduler decides it and applies its results
(:mod:`.scheduler`), the step sampler draws its tokens under their grammars (:mod:`.step_sampler`), the
speculation verifier walks its drafted rows (:mod:`.speculation.verify`); then the step's text deltas
reach each request's event loop in one callback.

Failure containment: no request can stop the thread. A runtime, sampling or detokenizing failure ends
the requests it touched with finish_reason="error" (the server turns that into a 500 body or a final SSE
error event) and the others go on; a scheduling failure (an engine bug: its bookkeeping can no longer
be trusted) ends every request the scheduler holds with "error" and continues on a fresh scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from edgeopt.engine.api import SHARED_NAMESPACE, ActiveRequest, CachedPrefix, EngineConfig, EngineStats, SamplingParams
from edgeopt.engine.commands import AddRequest
from edgeopt.engine.engine_config import check_config
from edgeopt.engine.engine_stats import engine_stats
from edgeopt.engine.inbox import Inbox
from edgeopt.engine.logprobs import sampling_rows
from edgeopt.engine.outputs import describe_failure, engine_stopped_message
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.scheduled import SchedulerOutput
from edgeopt.engine.scheduler import Scheduler
from edgeopt.engine.scheduler_factory import SchedulerFactory
from edgeopt.engine.speculation.calibration import calibrate
from edgeopt.engine.speculation.draft_model import DraftModel, check_draft_model
from edgeopt.engine.speculation.setup import speculation_for
from edgeopt.engine.speculation.verify import DraftVerifier
from edgeopt.engine.step_sampler import StepSampler
from edgeopt.engine.stream import RequestStream
from edgeopt.engine.validation import checked_params
from edgeopt.errors import BackendError, OverloadedError
from edgeopt.runtimes.base import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")


class Engine:
    def __init__(self, runtime: Runtime, config: EngineConfig, draft_model: DraftModel | None = None) -> None:
        """``draft_model``: speculative decoding drafts with it (serve --draft); the engine closes it."""
        check_config(config, runtime)
        check_draft_model(draft_model, runtime, config.max_running)
        self.runtime = runtime
        self.config = config
        self.draft_model = draft_model
        self.context_tokens = min(config.context_length, config.kv_capacity_tokens, runtime.info.context_length)
        self._speculation = speculation_for(runtime, config.speculative, self.context_tokens, draft_model)
        self._verifier = DraftVerifier(self._speculation.controller) if self._speculation is not None else None
        self._requests = RequestRegistry(runtime.tokenizer, runtime.info.eos_token_ids, config.stream_interval_s)
        self._schedulers = SchedulerFactory(runtime, config, self._requests, self.context_tokens, self._speculation)
        self._scheduler = self._schedulers.new()
        self._sampler = StepSampler(runtime.info.vocab_size)
        self._inbox = Inbox()
        self._stepping = self._inbox.stepping  # the step sets it: bound here, one attribute less a step
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.failure: str | None = None  # why the engine thread died, if it did (for /health)
        self._steps_total = 0
        self.prefill_tokens_total = 0

    # --- called from the server's threads ---------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """True while the engine thread is alive (a health check for the server)."""
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    def start(self) -> None:
        if self._thread is not None:
            raise BackendError("the engine is already started", "call start() once per Engine")
        self._thread = threading.Thread(target=self._run, name="edgeopt-engine", daemon=True)
        self._thread.start()

    def shutdown(self, close_runtime: bool = True) -> None:
        """Stop the thread; unfinished requests end with finish_reason="abort". Closes the runtime."""
        self._stopping = True
        self._inbox.wakeup.set()
        if self._thread is not None:
            self._thread.join()
        else:
            self._end_everything("abort")
        self._sampler.close()
        if close_runtime:
            self.runtime.close()
            if self.draft_model is not None:
                self.draft_model.close()

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    cache_namespace: str = SHARED_NAMESPACE) -> RequestStream:
        asyncio.get_running_loop()  # raises RuntimeError off an event loop: a caller bug
        params = checked_params(prompt_ids, params, self.runtime.info, self.context_tokens)
        if self._stopping:
            raise BackendError("the engine is shutting down", "retry against a running server")
        if self._thread is not None and not self._thread.is_alive():
            raise BackendError(engine_stopped_message(self.failure), "restart the server; see its log")
        if self._num_waiting() >= self.config.max_waiting:
            raise OverloadedError(f"{self._num_waiting()} requests are already waiting (limit "
                                  f"{self.config.max_waiting})", "retry later")
        tracker = self._requests.open(request_id, prompt_ids, params, self.abort, cache_namespace)
        self._inbox.post_request(AddRequest(tracker))
        return tracker.stream

    def abort(self, request_id: str) -> None:
        self._inbox.post_abort(request_id)

    # The prefix cache's calls (ServingEngine's) run on the engine thread, between two steps.

    def clear_prefix_cache(self) -> int:
        """Evict every cached prefix no running request borrows."""
        return self._between_steps(lambda scheduler: scheduler.cache.clear())

    def adopt_prefix(self, tokens: list[int], fill: Callable[[int], bool], namespace: str = SHARED_NAMESPACE) -> bool:
        """See ServingEngine.adopt_prefix; False too when the entry cannot fit beside running sequences."""
        return self._between_steps(lambda scheduler: scheduler.cells.adopt(tokens, fill, namespace))

    def with_cached_prefix(self, tokens: list[int], use: Callable[[int], T], namespace: str = SHARED_NAMESPACE) -> T | None:
        """See ServingEngine.with_cached_prefix."""
        return self._between_steps(lambda scheduler: scheduler.cells.use_entry(tokens, use, namespace))

    def cached_prefixes(self) -> list[CachedPrefix]:
        """See ServingEngine.cached_prefixes."""
        return self._between_steps(lambda scheduler: scheduler.cache.entry_paths())

    def restore_prefix(self, tokens: list[int], fill: Callable[[int], bool], namespace: str = SHARED_NAMESPACE) -> bool:
        """See ServingEngine.restore_prefix."""
        return self._between_steps(lambda scheduler: scheduler.cells.restore(tokens, fill, namespace))

    def _between_steps(self, work: Callable[[Scheduler], T]) -> T:
        """``work(scheduler)`` on the engine thread (the scheduler and the runtime belong to it); directly
        when no engine thread runs (tests driving step() by hand, or stopped)."""
        if self._thread is None or not self._thread.is_alive():
            return work(self._scheduler)
        return self._inbox.ask(work)

    def lose_runtime(self, error: str) -> list[RequestStream]:
        """The runtime is gone for good and the process is about to end (llama.cpp aborting on a lost RPC
        worker: edgeopt.rpc.lost_worker calls this from the aborting thread while the engine thread waits
        inside a step that never returns). From any thread: end every open request with "error", take no
        new one (/health turns 503 with ``error``), and return their streams, so that the caller can wait
        for the error to reach each client before the process goes."""
        self.failure = error
        self._stopping = True
        streams = [tracker.stream for tracker in self._requests.trackers()]
        self._requests.end_all("error", error)
        return streams

    def stats(self) -> EngineStats:
        return engine_stats(self._scheduler, self._sampler, self._verifier, self._requests, self._num_waiting(),
                            self._steps_total, self.prefill_tokens_total)

    def active_requests(self) -> list[ActiveRequest]:
        return self._requests.active_requests()

    # --- the engine thread -----------------------------------------------------------------------

    def _run(self) -> None:
        reason = "abort"
        inbox, requests = self._inbox, self._requests
        try:
            if self._speculation is not None:  # this device's decode-pass cost, before the first request
                calibrate(self._speculation.controller.cost, self.runtime)
            while not self._stopping:
                try:
                    inbox.wakeup.clear()
                    inbox.drain(self._scheduler, requests)
                    if not self._scheduler.has_work:
                        requests.flush(hold=False)  # nothing else is coming to carry held text
                        inbox.sleep()
                        continue
                    self.step()
                except Exception as exc:  # a bug in the engine's own bookkeeping: contain it, keep serving
                    log.exception("engine step failed; failing the requests the scheduler holds")
                    self._scheduler = self._schedulers.replace(self._scheduler, describe_failure(exc))
                    requests.flush()
        except BaseException as exc:  # noqa: BLE001 - fatal (the process is exiting): end every stream
            self.failure = describe_failure(exc)
            reason = "error"
            log.exception("engine thread stopped by %s", self.failure)
        finally:
            self._end_everything(reason, self.failure)

    def step(self) -> SchedulerOutput:
        """Schedule, run one forward pass, sample, apply, stream. Public for tests that drive it by hand.

        A runtime, sampling or detokenizing failure fails the requests concerned here; anything else
        (scheduling) propagates to the thread loop, which restarts the scheduler."""
        step_started = time.perf_counter()
        out = self._scheduler.schedule()
        if not out.chunks:
            assert not self._scheduler.running, "running sequences but nothing scheduled"
            return out
        prefill_tokens = out.prefill_tokens
        if prefill_tokens:
            # a step with prefill is long: send held text before it. (Not before a drafted step, barely longer than
            # a decode's: that woke the event loop every few tokens and cost the demo model 7% at one stream.)
            self._requests.flush(hold=False)
        sampled = out.sampled
        pending_masks = self._sampler.start(sampled)  # computed beside the forward pass
        self._stepping.set()
        try:
            logits = self.runtime.step(out.runtime_batch())
        except Exception as exc:
            self._scheduler.fail_step(out, exc)
            self._requests.flush()
            return out
        finally:
            masks = self._sampler.collect(pending_masks)
        self._steps_total += 1
        self.prefill_tokens_total += prefill_tokens
        rows = sampling_rows(out.chunks, logits)  # (the sampler never writes logits: the verifier reads them after)
        verifier = self._verifier
        drafted = verifier is not None and bool(out.drafted)
        with self._sampler.applying(sampled):
            self._scheduler.update_from_output(out, self._sampler.sample(sampled, rows, masks))
            if verifier is not None and drafted:
                verifier.verify(out, logits, self._sampler.draw, self._scheduler)
        self._requests.flush()
        if verifier is not None:  # the whole step: a drafted one also costs its verification and trims
            verifier.observe_step(out, time.perf_counter() - step_started, drafted)
        return out

    def _drain_inbox(self) -> None:
        """Apply what the inbox holds (the thread's loop drains it itself; tests that drive step() call this)."""
        self._inbox.drain(self._scheduler, self._requests)

    def _end_everything(self, reason: str, error: str | None = None) -> None:
        """The thread is leaving: every unfinished request ends ("abort" on shutdown, "error" on a crash)."""
        try:
            self._drain_inbox()
            for tracker in self._requests.trackers():
                self._scheduler.end(tracker.seq, reason, error)
        finally:  # even if the scheduler is broken, no stream may be left waiting forever
            self._requests.end_all(reason, error)

    def _num_waiting(self) -> int:
        return len(self._scheduler.waiting) + self._inbox.queued_requests()
