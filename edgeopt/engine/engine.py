"""The engine: a daemon thread that turns queued requests into batched runtime steps and streams text.

Threads: ``add_request`` / ``abort`` run on the server's event loop and only append to an inbox (no lock
is ever held across a decode, so the loop never blocks on the model). The engine thread owns the
scheduler, the sequences and the runtime; it drains the inbox, runs one step, samples, and hands the
step's text deltas back to each request's event loop in one callback.

Failure containment: no request can stop the thread. A runtime, sampling or detokenizing failure ends
the requests it touched with finish_reason="error" (the server turns that into a 500 body or a final SSE
error event) and the others go on; a scheduling failure (an engine bug: its bookkeeping can no longer
be trusted) ends every request the scheduler holds with "error" and continues on a fresh scheduler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import numpy as np

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, SamplingParams, TokenLogprob
from edgeopt.engine.commands import AbortRequest, AddRequest, BetweenSteps, EngineCommand
from edgeopt.engine.constraint import MaskComputer, StepMasks
from edgeopt.engine.engine_config import check_config
from edgeopt.engine.logprobs import log_softmax, sampling_rows, token_logprob
from edgeopt.engine.outputs import RequestTracker, describe_failure, engine_stopped_message
from edgeopt.engine.prefix_cache_modes import prefix_cache_for
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.sampler import mask_can_wait, processed_logits, sample_masked_row, sample_next_tokens
from edgeopt.engine.token_bitmask import allowed_tokens
from edgeopt.engine.scheduler import ScheduledChunk, Scheduler, SchedulerOutput
from edgeopt.engine.speculation import SpeculationCounters
from edgeopt.engine.speculation.setup import speculation_for
from edgeopt.engine.speculation.verify import draft_blocks, verify_block
from edgeopt.engine.sequence import Sequence, SequenceState
from edgeopt.engine.stream import RequestStream
from edgeopt.engine.validation import check_runtime_supports, validate_request
from edgeopt.errors import BackendError, OverloadedError
from edgeopt.runtimes.base import Runtime, StepInput

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 0.5  # the thread sleeps on an event; this only bounds how long shutdown can take
_CALL_TIMEOUT_S = 120.0  # _between_steps waits for the step in flight, never for a request to end
T = TypeVar("T")


class Engine:
    def __init__(self, runtime: Runtime, config: EngineConfig) -> None:
        check_config(config, runtime)
        self.runtime = runtime
        self.config = config
        self.context_tokens = min(config.context_length, config.kv_capacity_tokens, runtime.info.context_length)
        self._speculation = speculation_for(runtime, config.speculative, self.context_tokens)
        self.speculation_counters = SpeculationCounters()
        self._scheduler = self._new_scheduler()
        self._requests = RequestRegistry(runtime.tokenizer, runtime.info.eos_token_ids, config.stream_interval_s)
        self._masks = MaskComputer(runtime.info.vocab_size)
        self._grammar_steps = 0  # steps with at least one constrained row
        self._mask_wait_s = 0.0  # engine-thread time blocked on masks after the forward pass
        self._mask_apply_s = 0.0  # engine-thread time sampling and appending in steps that had masks
        self._inbox: deque[EngineCommand] = deque()  # drained by the engine thread between steps
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._scheduled_ids: set[str] = set()  # handed to the scheduler (not only in the inbox)
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
        self._masks.close()
        if close_runtime:
            self.runtime.close()

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        asyncio.get_running_loop()  # raises RuntimeError off an event loop: a caller bug
        params = dataclasses.replace(params, logit_bias={int(k): float(v) for k, v in params.logit_bias.items()})
        validate_request(prompt_ids, params, self.runtime.info.vocab_size, self.context_tokens)
        check_runtime_supports(params, self.runtime.info)
        if self._stopping:
            raise BackendError("the engine is shutting down", "retry against a running server")
        if self._thread is not None and not self._thread.is_alive():
            raise BackendError(engine_stopped_message(self.failure), "restart the server; see its log")
        if self._num_waiting() >= self.config.max_waiting:
            raise OverloadedError(f"{self._num_waiting()} requests are already waiting (limit "
                                  f"{self.config.max_waiting})", "retry later")
        tracker = self._requests.open(request_id, prompt_ids, params, on_close=self.abort)
        self._inbox.append(AddRequest(tracker))
        self._wakeup.set()
        return tracker.stream

    def abort(self, request_id: str) -> None:
        self._inbox.append(AbortRequest(request_id))
        self._wakeup.set()

    def clear_prefix_cache(self) -> int:
        """Evict every cached prefix no running request borrows; runs on the engine thread between steps."""
        return self._between_steps(Scheduler.clear_cache)

    def adopt_prefix(self, tokens: list[int], fill: Callable[[int], bool]) -> bool:
        """Make ``tokens`` a prefix-cache entry whose KV ``fill(sequence id)`` loads into the runtime (True
        when it did); False without a prefix cache, or when the entry cannot fit beside running sequences."""
        return self._between_steps(lambda scheduler: scheduler.adopt_prefix(tokens, fill))

    def with_cached_prefix(self, tokens: list[int], use: Callable[[int], T]) -> T | None:
        """``use(sequence id)`` of the prefix-cache entry holding exactly ``tokens``, run while no step can
        touch that entry; None when no entry holds them (or there is no prefix cache)."""
        def run(scheduler: Scheduler) -> T | None:
            seq_id = scheduler.cache.entry_holding(tokens)
            return None if seq_id is None else use(seq_id)

        return self._between_steps(run)

    def _between_steps(self, work: Callable[[Scheduler], T]) -> T:
        """Run ``work(scheduler)`` on the engine thread between two steps (the scheduler and the runtime
        belong to that thread) and return its result; directly when no engine thread runs."""
        if self._thread is None or not self._thread.is_alive():
            return work(self._scheduler)  # no thread (tests driving step() by hand, or stopped)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._inbox.append(BetweenSteps(work, done))
        self._wakeup.set()
        return done.result(timeout=_CALL_TIMEOUT_S)

    def stats(self) -> EngineStats:
        sched = self._scheduler
        cache = sched.cache_counters
        spec = self.speculation_counters.snapshot()
        return EngineStats(
            running=len(sched.running), waiting=self._num_waiting(), kv_used_tokens=sched.kv.used,
            kv_capacity_tokens=sched.kv.capacity, preemptions_total=sched.preemptions_total,
            steps_total=self._steps_total, prefill_tokens_total=self.prefill_tokens_total,
            generated_tokens_total=self._requests.generated_tokens_total, kv_cached_tokens=sched.cached_tokens,
            prefix_cache_queries_total=cache.queries, prefix_cache_hits_total=cache.hits,
            prefix_cache_query_tokens_total=cache.query_tokens, prefix_cache_hit_tokens_total=cache.hit_tokens,
            prefix_cache_evicted_tokens_total=sched.cache.evicted_total,
            grammar_steps_total=self._grammar_steps, grammar_mask_seconds_total=self._masks.compute_seconds,
            grammar_wait_seconds_total=self._mask_wait_s, grammar_apply_seconds_total=self._mask_apply_s,
            grammar_checked_total=self._masks.checked_total, grammar_refused_total=self._masks.refused_total,
            grammar_redo_seconds_total=self._masks.redo_seconds,
            speculative_drafted_total={k: v[0] for k, v in spec.items()},
            speculative_accepted_total={k: v[1] for k, v in spec.items()},
        )

    def active_requests(self) -> list[ActiveRequest]:
        return self._requests.active_requests()

    # --- the engine thread -----------------------------------------------------------------------

    def _run(self) -> None:
        reason = "abort"
        try:
            while not self._stopping:
                try:
                    self._wakeup.clear()
                    self._drain_inbox()
                    if not self._scheduler.has_work:
                        self._requests.flush(hold=False)  # nothing else is coming to carry held text
                        self._wakeup.wait(_IDLE_WAIT_S)
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

    def step(self) -> SchedulerOutput:
        """Schedule, run one forward pass, sample, stream. Public for tests that drive it by hand.

        A runtime, sampling or detokenizing failure fails the requests concerned here; anything else
        (scheduling) propagates to the thread loop, which restarts the scheduler."""
        out = self._scheduler.schedule()
        if not out.chunks:
            assert not self._scheduler.running, "running sequences but nothing scheduled"
            return out
        batch = [StepInput(c.seq.slot, c.tokens, c.start_pos, c.want_logits, c.all_logits) for c in out.chunks]
        if len(batch) < sum(len(item.tokens) for item in batch):
            self._requests.flush(hold=False)  # a step with prefill is long: send held text before it
        sampled = [c.seq for c in out.chunks if c.want_logits and not c.draft]  # drafted chunks: _verify
        # Rows whose pick is checked after sampling start nothing here; the other constrained rows' masks are
        # computed on a helper thread while the runtime runs the forward pass (edgeopt.engine.constraint).
        pending_masks = self._masks.start([s.constraint for s in sampled], [mask_can_wait(s.params) for s in sampled])
        started = time.perf_counter()
        try:
            logits = self.runtime.step(batch)
        except Exception as exc:
            log.exception("runtime step failed; failing the %d requests in the batch", len(batch))
            for chunk in out.chunks:
                self._fail(chunk.seq, exc)
            self._requests.flush()
            return out
        finally:
            masks = self._collect_masks(pending_masks)
        self._steps_total += 1
        if self._speculation is not None and all(len(c.tokens) - len(c.draft) == 1 for c in out.chunks):
            # Decode steps only: a verify's few tokens cost far more each than a long prefill's (measured on
            # SmolLM2 Q4_1, 1 thread: 4 tokens 2.7x one, 128 tokens 25x), so prefills would mislead the fit.
            self._speculation.controller.observe_step(out.num_tokens, time.perf_counter() - started)
        drafted = [c for c in out.chunks if c.draft]
        blocks = draft_blocks(out.chunks, logits) if drafted else []
        logits = sampling_rows(out.chunks, logits)
        self._scheduler.mark_computed(out.chunks)
        # Prefill work: prompt chunks and recomputation after preemption (anything but a 1-token decode).
        # (A drafted chunk's guesses are decode work, counted by the speculation counters.)
        self.prefill_tokens_total += sum(len(c.tokens) for c in out.chunks
                                         if not c.draft and (len(c.tokens) > 1 or c.start_pos < len(c.seq.prompt_ids)))
        started = time.perf_counter()
        self._sample_and_append(sampled, logits, masks)
        for chunk, block in zip(drafted, blocks):
            self._verify(chunk, block)
        if any(s.constraint is not None for s in sampled):
            # Sampling, checking picks, redone masks and advancing the grammars (all including plain work).
            self._grammar_steps += 1
            self._mask_apply_s += time.perf_counter() - started
        self._requests.flush()
        return out

    def _sample_and_append(self, sampled: list[Sequence], logits: np.ndarray,
                           masks: StepMasks | Exception | None) -> None:
        """One token per sampling sequence (under its grammar mask), appended and streamed."""
        bitmask = masks.bitmask if isinstance(masks, StepMasks) else None
        tokens = self._sample(logits, sampled, bitmask)
        failures = [token if isinstance(token, Exception) else _grammar_failure(masks, i, seq)
                    for i, (seq, token) in enumerate(zip(sampled, tokens))]
        self._redraw_refused(logits, sampled, tokens, failures)
        for i, (seq, token, failure) in enumerate(zip(sampled, tokens, failures)):
            if failure is not None or isinstance(token, Exception):  # a failed draw is among the failures
                self._fail(seq, failure or token)  # type: ignore[arg-type]
                continue
            try:
                row_mask = bitmask[i] if bitmask is not None and seq.constraint is not None else None
                self._append_token(seq, token, self._logprob(logits[i], seq, row_mask, token))
            except Exception as exc:  # detokenizer / stop-string matcher / grammar: only this request fails
                log.exception("finishing token %d of request %s failed", token, seq.request_id)
                self._fail(seq, exc)

    def _verify(self, chunk: ScheduledChunk, block: np.ndarray) -> None:
        """Emit the target's tokens from a drafted chunk's rows (edgeopt.engine.speculation.verify)."""
        seq = chunk.seq
        if seq.state.is_done:  # the step failed it already
            return
        assert self._speculation is not None
        try:
            accepted = verify_block(seq, chunk.draft, block, self._draw, self._scheduler.keep_drafted,
                                    self._scheduler.drop_drafted, self._append_token)
        except Exception as exc:  # a grammar, detokenizer or stop-string failure: only this request fails
            log.exception("verifying the draft of request %s failed", seq.request_id)
            if not seq.state.is_done:
                self._fail(seq, exc)
            return
        self._speculation.controller.record(seq, len(chunk.draft), accepted)
        self.speculation_counters.record(self._speculation.controller.source, len(chunk.draft), accepted)

    def _draw(self, row: np.ndarray, seq: Sequence) -> tuple[int, TokenLogprob | None]:
        """One token from one row, as an ordinary step draws it: the grammar's mask when the pick needs it
        (checked first where that is exact, see edgeopt.engine.constraint), the same generator."""
        constraint = seq.constraint
        mask = None
        token = -1
        if constraint is None or mask_can_wait(seq.params):
            token = sample_next_tokens(row[None, :], [seq])[0]
        if constraint is not None and (token < 0 or not constraint.allows(token)):
            masks = self._masks.compute([constraint])
            if masks.errors[0] is not None:
                raise masks.errors[0]
            mask = masks.bitmask[0]
            token = sample_masked_row(row, seq, mask)
        return token, self._logprob(row, seq, mask, token)

    def _redraw_refused(self, logits: np.ndarray, sampled: list[Sequence], tokens: list[int | Exception],
                        failures: list[Exception | None]) -> None:
        """Rows whose mask waited were drawn unmasked: each grammar checks its row's pick, and the rows it
        refuses get their masks (one call for all) and are drawn again under them, in place."""
        waited = [s.constraint if _mask_waits(s) else None for s in sampled]
        refused = self._masks.refused_picks(waited, tokens)
        if not refused:
            return
        masks: StepMasks | Exception
        try:
            masks = self._masks.redo_masks([waited[i] for i in refused])
        except Exception as exc:
            log.exception("computing grammar masks failed")
            masks = exc
        for row, i in enumerate(refused):
            failures[i] = masks if isinstance(masks, Exception) else masks.errors[row]
            if isinstance(masks, StepMasks) and failures[i] is None:
                try:
                    tokens[i] = sample_masked_row(logits[i], sampled[i], masks.bitmask[row])
                except Exception as exc:  # row by row: a failure stays with its request
                    failures[i] = exc

    def _collect_masks(self, pending: Future[StepMasks] | None) -> StepMasks | Exception | None:
        """The step's masks (None: no row is constrained), or what computing them raised: then the
        constrained requests fail and the others go on."""
        if pending is None:
            return None
        start = time.perf_counter()
        try:
            return pending.result()
        except Exception as exc:
            log.exception("computing grammar masks failed")
            return exc
        finally:
            self._mask_wait_s += time.perf_counter() - start

    @staticmethod
    def _logprob(row: np.ndarray, seq: Sequence, packed_mask: np.ndarray | None, token: int) -> TokenLogprob | None:
        """From the same processed logits the sampler drew from (before appending the token: penalties see
        the same history, and the full grammar mask, unpacked for this row only); see edgeopt.engine.logprobs."""
        if seq.params.logprobs is None:
            return None
        allowed = None if packed_mask is None else allowed_tokens(packed_mask, row.shape[-1])
        return token_logprob(log_softmax(processed_logits(row, seq, allowed)), token, seq.params.logprobs)

    def _sample(self, logits: np.ndarray, seqs: list[Sequence], bitmask: np.ndarray | None) -> list[int | Exception]:
        """Sample the batch at once; if that raises, row by row so one bad request fails alone."""
        try:
            return list(sample_next_tokens(logits, seqs, bitmask))
        except Exception:
            log.exception("batch sampling failed; sampling row by row to isolate the request")
        tokens: list[int | Exception] = []
        for i, seq in enumerate(seqs):
            try:
                row_mask = None if bitmask is None else bitmask[i:i + 1]
                tokens.append(sample_next_tokens(logits[i:i + 1], [seq], row_mask)[0])
            except Exception as exc:
                tokens.append(exc)
        return tokens

    def _append_token(self, seq: Sequence, token: int, logprob: TokenLogprob | None = None) -> None:
        tracker = self._tracker(seq)
        seq.state = SequenceState.DECODING
        output = self._requests.add_token(tracker, token, self.context_tokens, logprob)
        if output.finished:
            self._scheduler.finish(seq, SequenceState.FINISHED, output.finish_reason or "stop")
            self._scheduled_ids.discard(seq.request_id)
        self._requests.emit(tracker, output)

    def _drain_inbox(self) -> None:
        while self._inbox:
            command = self._inbox.popleft()
            if isinstance(command, AddRequest):
                self._scheduler.add(command.tracker.seq)
                self._scheduled_ids.add(command.tracker.seq.request_id)
            elif isinstance(command, BetweenSteps):
                self._call(command)
            else:
                tracker = self._requests.get(command.request_id)
                if tracker is not None and not tracker.seq.state.is_done:
                    self._finish(tracker.seq, SequenceState.ABORTED, "abort")
        self._requests.flush()

    def _tracker(self, seq: Sequence) -> RequestTracker:
        tracker = self._requests.get(seq.request_id)
        assert tracker is not None, f"request {seq.request_id} is scheduled but not registered"
        return tracker

    def _call(self, command: BetweenSteps[object]) -> None:
        try:
            command.done.set_result(command.work(self._scheduler))
        except Exception as exc:  # e.g. a runtime that cannot drop cells: the caller hears why
            command.done.set_exception(exc)

    def _new_scheduler(self) -> Scheduler:
        """A scheduler with a prefix cache when the config asks for one and the runtime has cache slots (in the
        runtime's storage mode), else with the null cache."""
        info = self.runtime.info
        cache = prefix_cache_for(self.runtime, range(info.max_slots, info.max_slots + info.cache_slots),
                                 shares_cells=info.shares_kv_cells, enabled=self.config.prefix_cache)
        return Scheduler(self.config, release_slot=self.runtime.release, cache=cache,
                         speculation=self._speculation)

    def _finish(self, seq: Sequence, state: SequenceState, reason: str, error: str | None = None) -> None:
        tracker = self._tracker(seq)
        self._scheduler.finish(seq, state, reason)
        self._scheduled_ids.discard(seq.request_id)
        self._requests.end(tracker, reason, error)

    def _fail(self, seq: Sequence, exc: Exception) -> None:
        self._finish(seq, SequenceState.ABORTED, "error", error=describe_failure(exc))

    def _restart_scheduler(self, error: str) -> None:
        """End every request the scheduler was given with "error", then continue on a fresh scheduler
        and empty runtime slots (the old accounting may disagree with the runtime's KV)."""
        trackers = [t for t in self._requests.trackers() if t.seq.request_id in self._scheduled_ids]
        self._scheduler = self._new_scheduler()
        info = self.runtime.info
        for slot in [*range(self.config.max_running), *range(info.max_slots, info.max_slots + info.cache_slots)]:
            try:
                self.runtime.release(slot)
            except Exception:  # noqa: BLE001 - a runtime that cannot even release: later steps will say so
                log.exception("releasing runtime slot %d after a scheduling failure failed", slot)
        for tracker in trackers:
            tracker.seq.state, tracker.seq.finish_reason, tracker.seq.slot = SequenceState.ABORTED, "error", None
            self._scheduled_ids.discard(tracker.seq.request_id)
            self._requests.end(tracker, "error", error)
        self._requests.flush()

    def _end_everything(self, reason: str, error: str | None = None) -> None:
        """The thread is leaving: every unfinished request ends ("abort" on shutdown, "error" on a crash)."""
        try:
            self._drain_inbox()
            for tracker in self._requests.trackers():
                self._finish(tracker.seq, SequenceState.ABORTED, reason, error=error)
        finally:  # even if the scheduler is broken, no stream may be left waiting forever
            self._requests.end_all(reason, error)

    def _num_waiting(self) -> int:
        return len(self._scheduler.waiting) + sum(1 for command in list(self._inbox) if isinstance(command, AddRequest))


def _mask_waits(seq: Sequence) -> bool:
    """A constrained row drawn without its mask this step (see edgeopt.engine.constraint)."""
    return seq.constraint is not None and seq.constraint.checks_pick


def _grammar_failure(masks: StepMasks | Exception | None, row: int, seq: Sequence) -> Exception | None:
    """Why ``seq`` (row ``row``) cannot take this step's token: its grammar failed, or the whole eager mask
    computation did (which only concerns the rows whose masks it computed)."""
    if isinstance(masks, StepMasks):
        return masks.errors[row]
    return masks if masks is not None and seq.constraint is not None and not _mask_waits(seq) else None
