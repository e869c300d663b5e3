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
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, SamplingParams
from edgeopt.engine.commands import AbortRequest, AddRequest, BetweenSteps, EngineCommand
from edgeopt.engine.engine_config import check_config
from edgeopt.engine.engine_stats import engine_stats
from edgeopt.engine.logprobs import sampling_rows
from edgeopt.engine.outputs import describe_failure, engine_stopped_message
from edgeopt.engine.prefix_cache_modes import prefix_cache_for
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.scheduled import SchedulerOutput
from edgeopt.engine.scheduler import Scheduler
from edgeopt.engine.speculation.calibration import measure_pass_cost
from edgeopt.engine.speculation.draft_model import DraftModel, check_draft_model
from edgeopt.engine.speculation.setup import speculation_for
from edgeopt.engine.speculation.verify import DraftVerifier
from edgeopt.engine.step_sampler import StepSampler
from edgeopt.engine.stream import RequestStream
from edgeopt.engine.validation import checked_params
from edgeopt.errors import BackendError, OverloadedError
from edgeopt.runtimes.base import Runtime

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 0.5  # the thread sleeps on an event; this only bounds how long shutdown can take
_CALL_TIMEOUT_S = 120.0  # _between_steps waits for the step in flight, never for a request to end
_HAND_OVER_WAIT_S = 0.002  # the longest add_request waits for an idle engine to start its step
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
        self._scheduler = self._new_scheduler()
        self._sampler = StepSampler(runtime.info.vocab_size)
        self._inbox: deque[EngineCommand] = deque()  # drained by the engine thread between steps
        self._wakeup = threading.Event()
        self._idle = False  # the engine thread sleeps on _wakeup (written by it alone; read as a hint)
        self._stepping = threading.Event()  # set when a step's forward pass starts (_wake_for_request)
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
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
        else:
            self._end_everything("abort")
        self._sampler.close()
        if close_runtime:
            self.runtime.close()
            if self.draft_model is not None:
                self.draft_model.close()

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        asyncio.get_running_loop()  # raises RuntimeError off an event loop: a caller bug
        params = checked_params(prompt_ids, params, self.runtime.info, self.context_tokens)
        if self._stopping:
            raise BackendError("the engine is shutting down", "retry against a running server")
        if self._thread is not None and not self._thread.is_alive():
            raise BackendError(engine_stopped_message(self.failure), "restart the server; see its log")
        if self._num_waiting() >= self.config.max_waiting:
            raise OverloadedError(f"{self._num_waiting()} requests are already waiting (limit "
                                  f"{self.config.max_waiting})", "retry later")
        tracker = self._requests.open(request_id, prompt_ids, params, on_close=self.abort)
        self._inbox.append(AddRequest(tracker))
        self._wake_for_request()
        return tracker.stream

    def _wake_for_request(self) -> None:
        """Wake the engine thread, and when it was idle give it the GIL until its forward pass starts.

        The caller is the event loop, which would keep the GIL through the rest of the request's handling
        (the response, its headers, the middleware: ~0.5 ms on a 2-core CPU), so an idle engine could only
        start once the loop next waits. Waiting here instead releases the GIL; the engine schedules at once,
        and the loop resumes when the step's C call releases the GIL, its remaining work overlapping the
        forward pass: 0.45 ms less to a lone request's first token, measured from inside the server. A busy
        engine picks the request up at its next step anyway: no wait then."""
        self._stepping.clear()
        self._wakeup.set()
        if self._idle:
            self._stepping.wait(_HAND_OVER_WAIT_S)

    def abort(self, request_id: str) -> None:
        self._inbox.append(AbortRequest(request_id))
        self._wakeup.set()

    def clear_prefix_cache(self) -> int:
        """Evict every cached prefix no running request borrows; runs on the engine thread between steps."""
        return self._between_steps(Scheduler.clear_cache)

    def adopt_prefix(self, tokens: list[int], fill: Callable[[int], bool]) -> bool:
        """See ServingEngine.adopt_prefix; False too when the entry cannot fit beside running sequences."""
        return self._between_steps(lambda scheduler: scheduler.adopt_prefix(tokens, fill))

    def with_cached_prefix(self, tokens: list[int], use: Callable[[int], T]) -> T | None:
        """See ServingEngine.with_cached_prefix: ``use`` runs on the engine thread, between two steps."""
        return self._between_steps(lambda scheduler: scheduler.with_cached_prefix(tokens, use))

    def cached_prefixes(self) -> list[list[int]]:
        """See ServingEngine.cached_prefixes."""
        return self._between_steps(Scheduler.cached_prefixes)

    def restore_prefix(self, tokens: list[int], fill: Callable[[int], bool]) -> bool:
        """See ServingEngine.restore_prefix."""
        return self._between_steps(lambda scheduler: scheduler.restore_prefix(tokens, fill))

    def _between_steps(self, work: Callable[[Scheduler], T]) -> T:
        """Run ``work(scheduler)`` on the engine thread between two steps (the scheduler and the runtime
        belong to that thread) and return its result; directly when no engine thread runs."""
        if self._thread is None or not self._thread.is_alive():
            return work(self._scheduler)  # no thread (tests driving step() by hand, or stopped)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._inbox.append(BetweenSteps(work, done))
        self._wakeup.set()
        return done.result(timeout=_CALL_TIMEOUT_S)

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
        try:
            self._measure_pass_cost()
            while not self._stopping:
                try:
                    self._wakeup.clear()
                    self._drain_inbox()
                    if not self._scheduler.has_work:
                        self._requests.flush(hold=False)  # nothing else is coming to carry held text
                        self._idle = True
                        self._wakeup.wait(_IDLE_WAIT_S)
                        self._idle = False
                        continue
                    self.step()
                except Exception as exc:  # a bug in the engine's own bookkeeping: contain it, keep serving
                    log.exception("engine step failed; failing the requests the scheduler holds")
                    self._restart_scheduler(describe_failure(exc))
        except BaseException as exc:  # noqa: BLE001 - fatal (the process is exiting): end every stream
            self.failure = describe_failure(exc)
            reason = "error"
            log.exception("engine thread stopped by %s", self.failure)
        finally:
            self._end_everything(reason, self.failure)

    def _measure_pass_cost(self) -> None:
        """Give speculation this device's decode-pass cost before the first request (speculation.calibration)."""
        if self._speculation is None:
            return
        try:
            cost = measure_pass_cost(self.runtime)
        except Exception as exc:  # noqa: BLE001 - a measurement, not the service: the prior stays
            log.warning("speculation: timing the decode pass failed (%s); the controller keeps its prior", exc)
            return
        if cost is None:
            log.info("speculation: the decode pass's timings varied too much to use (a busy device); the "
                     "controller starts from its prior and learns from the steps it serves")
            return
        self._speculation.controller.cost.set_prior(cost.fixed_seconds, cost.per_token_ratio, cost.curve)
        one = cost.curve[1]
        log.info("speculation: a decode pass of 1 token takes %.1f ms on this device; of %s tokens %s times that",
                 one * 1000, "/".join(str(n) for n in list(cost.curve)[1:]),
                 "/".join(f"{t / one:.2f}" for t in list(cost.curve.values())[1:]))

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
        while self._inbox:
            command = self._inbox.popleft()
            if isinstance(command, AddRequest):
                self._scheduler.add(command.tracker.seq)
            elif isinstance(command, BetweenSteps):
                try:
                    command.done.set_result(command.work(self._scheduler))
                except Exception as exc:  # e.g. a runtime that cannot drop cells: the caller hears why
                    command.done.set_exception(exc)
            else:
                tracker = self._requests.get(command.request_id)
                if tracker is not None and not tracker.seq.state.is_done:
                    self._scheduler.end(tracker.seq, "abort")
        self._requests.flush()

    def _new_scheduler(self) -> Scheduler:
        """With a prefix cache in the runtime's storage mode when asked for and the runtime has cache slots."""
        info = self.runtime.info
        cache = prefix_cache_for(self.runtime, range(info.max_slots, info.max_slots + info.cache_slots),
                                 shares_cells=info.shares_kv_cells, enabled=self.config.prefix_cache)
        return Scheduler(self.config, self.runtime.release, self._requests, self.context_tokens, cache=cache,
                         speculation=self._speculation)

    def _restart_scheduler(self, error: str) -> None:
        """End every request the scheduler was given with "error", then continue on a fresh scheduler
        and empty runtime slots (the old accounting may disagree with the runtime's KV)."""
        broken, self._scheduler = self._scheduler, self._new_scheduler()
        info = self.runtime.info
        for slot in [*range(self.config.max_running), *range(info.max_slots, info.max_slots + info.cache_slots)]:
            try:
                self.runtime.release(slot)
            except Exception:  # noqa: BLE001 - a runtime that cannot even release: later steps will say so
                log.exception("releasing runtime slot %d after a scheduling failure failed", slot)
        broken.abandon(error)
        self._requests.flush()

    def _end_everything(self, reason: str, error: str | None = None) -> None:
        """The thread is leaving: every unfinished request ends ("abort" on shutdown, "error" on a crash)."""
        try:
            self._drain_inbox()
            for tracker in self._requests.trackers():
                self._scheduler.end(tracker.seq, reason, error)
        finally:  # even if the scheduler is broken, no stream may be left waiting forever
            self._requests.end_all(reason, error)

    def _num_waiting(self) -> int:
        return len(self._scheduler.waiting) + sum(1 for command in list(self._inbox) if isinstance(command, AddRequest))
