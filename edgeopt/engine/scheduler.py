"""FIFO continuous-batching scheduler: decides which tokens of which sequences go into the next forward
pass (:meth:`Scheduler.schedule`), and applies what the pass gave (:meth:`Scheduler.update_from_output`):
the chunks' KV is computed, each sampling sequence appends its token, its stop conditions are checked, and
a sequence that ended is retired and its cells freed, as nano-vllm's ``postprocess`` and vLLM v1's
``update_from_output`` do. The requests' text (detokenizer, stop strings, the stream) is the request
registry's (:mod:`edgeopt.engine.registry`); the scheduler tells it each token and each ending.

Each step, within ``step_token_budget`` tokens:

1. every running sequence that is decoding contributes its one pending token (oldest first);
2. then prefill chunks of running sequences still prefilling: at most ``prefill_chunk`` tokens each in a
   step that carries decode tokens (the cap bounds how long a prompt delays the running streams' next
   token), the whole budget when nothing decodes (one prompt alone prefills in as few passes as
   llama-server's n_batch would take: every pass re-reads the weights);
3. then waiting sequences are admitted in arrival order while a slot is free and the KV cells left,
   after what admitted prompts still need, hold the newcomer's whole prompt (admission control). A
   waiting prompt that shares a long prefix with a running sequence's prompt waits until that prefix is
   computed and then borrows it through the prefix cache (:mod:`edgeopt.engine.running_prefix`; others behind
   it may go first meanwhile).
4. then, with speculation on (:mod:`edgeopt.engine.speculation.drafting`), decode tokens are extended with
   drafted tokens where the controller finds it pays, within the budget left, the free cells (a draft never
   evicts or preempts) and the logits rows one pass returns; the cells of drafted tokens the model does not
   agree with are given back after the step (``drop_drafted``).

When a running sequence needs a KV cell and none is free, the prefix cache gives back its least
recently used cells first; only then is the *newest* running sequence preempted (its KV is dropped and
it goes back to the front of the queue to recompute later). The oldest running sequence therefore
always progresses, and since every request fits the capacity alone (checked when it arrives), the
engine never deadlocks and never overdraws the cache. Cached cells count against the capacity but
never block anything: admission counts them as free when they can be evicted.

An admitted sequence first borrows the KV of the longest cached prefix of its tokens (at most all but the
last: the last must be fed to get logits), and a finished or aborted one parks its computed KV in the
cache instead of dropping it (see :mod:`edgeopt.engine.prefix_cache`). With caching off the cache is a
:class:`~edgeopt.engine.prefix_cache.NullPrefixCache`, which lends and keeps nothing. The cells, slots and
the cache are moved by :class:`~edgeopt.engine.kv_cells.KvCells`; the scheduler decides who gets them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeopt.engine.api import EngineConfig, TokenLogprob
from edgeopt.engine.kv_budget import KvBudget, SlotPool
from edgeopt.engine.kv_cells import KvCells
from edgeopt.engine.outputs import RequestTracker, describe_failure
from edgeopt.engine.prefix_cache import PrefixReuse
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.running_prefix import waits_for_running_prefix
from edgeopt.engine.scheduled import Pick, ScheduledChunk, SchedulerOutput
from edgeopt.engine.sequence import Sequence, SequenceState
from edgeopt.engine.speculation.drafting import attach_drafts

if TYPE_CHECKING:
    from edgeopt.engine.speculation.setup import Speculation

__all__ = ["ScheduledChunk", "Scheduler", "SchedulerOutput"]

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, config: EngineConfig, release_slot: Callable[[int], None], requests: RequestRegistry,
                 context_tokens: int, cache: PrefixReuse | None = None, speculation: Speculation | None = None) -> None:
        self.config = config
        self.speculation = speculation
        self._requests = requests  # each token and each ending of a request goes through here
        self._context_tokens = context_tokens  # a sequence this long ends with "length"
        # Ids of the requests given (add) and not yet retired (finish): kept apart from the queues, so that
        # when this scheduler's bookkeeping breaks, abandon() still ends every request it held.
        self._held_ids: set[str] = set()
        self.cells = KvCells(config.kv_capacity_tokens, config.max_running, release_slot, cache)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: oldest first, preemption takes the last
        self.preemptions_total = 0

    @property
    def kv(self) -> KvBudget:
        return self.cells.kv

    @property
    def cache(self) -> PrefixReuse:
        return self.cells.cache

    @property
    def slots(self) -> SlotPool:
        return self.cells.slots

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        self._held_ids.add(seq.request_id)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.step_token_budget
        for seq in [s for s in self.running if s.num_pending == 1]:
            if budget == 0:
                break
            if seq.is_running and self._make_room(seq, 1, out):
                out.chunks.append(self._take(seq, 1))
                budget -= 1
        cap = self.config.prefill_chunk if out.chunks else self.config.step_token_budget
        for seq in [s for s in self.running if s.num_pending > 1]:
            if budget == 0:
                break
            if seq.is_running and self._make_room(seq, 1, out):
                chunk = min(cap, budget, seq.num_pending)
                self.cells.evict_cached(chunk)
                chunk = min(chunk, self.cells.free)
                out.chunks.append(self._take(seq, chunk))
                budget -= chunk
        for seq in list(self.waiting):
            if budget == 0 or not self._slot_free():
                break
            if waits_for_running_prefix(seq, self.running, self.cells):
                continue  # a running sequence is computing this prompt's prefix: borrow it once computed
            if not self.cells.can_hold(seq, self.running):
                break
            self.waiting.remove(seq)
            self._admit(seq)
            chunk = min(cap, budget, seq.num_pending)
            self.cells.evict_cached(chunk)
            out.chunks.append(self._take(seq, chunk))
            budget -= chunk
        if self.speculation is not None and budget > 0:
            attach_drafts(self.speculation, out, budget, self.cells.free, self.cells.allocate)
        return out

    # --- applying a step's results ------------------------------------------------------------------

    def update_from_output(self, out: SchedulerOutput, picks: list[Pick | Exception]) -> None:
        """Apply a step the runtime ran: its chunks' KV is computed, and each sampling sequence
        (``out.sampled``, in order) takes its pick; a pick that is an exception fails that request alone.
        Drafted chunks are applied by the speculation verifier (append_token, keep_drafted, drop_drafted)."""
        self.mark_computed(out.chunks)
        for seq, pick in zip(out.sampled, picks, strict=True):
            if isinstance(pick, Exception):
                self.fail(seq, pick)
                continue
            try:
                self.append_token(seq, pick.token, pick.logprob)
            except Exception as exc:  # detokenizer / stop-string matcher / grammar: only this request fails
                log.exception("finishing token %d of request %s failed", pick.token, seq.request_id)
                self.fail(seq, exc)

    def append_token(self, seq: Sequence, token: int, logprob: TokenLogprob | None = None) -> None:
        """``seq`` produced ``token``: append it, check its stop conditions (end token, stop string, complete
        grammar, length, context), retire it when it ended, and queue its text for the stream."""
        tracker = self._tracker(seq)
        seq.state = SequenceState.DECODING
        output = self._requests.add_token(tracker, token, self._context_tokens, logprob)
        if output.finished:
            self.finish(seq, SequenceState.FINISHED, output.finish_reason or "stop")
        self._requests.emit(tracker, output)

    def fail_step(self, out: SchedulerOutput, exc: Exception) -> None:
        """The runtime could not run the step: every request in it fails, the others go on."""
        log.error("runtime step failed; failing the %d requests in the batch", len(out.chunks), exc_info=exc)
        for chunk in out.chunks:
            self.fail(chunk.seq, exc)

    def fail(self, seq: Sequence, exc: Exception) -> None:
        self.end(seq, "error", describe_failure(exc))

    def end(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        """End a request without a new token: "abort" (client gone, shutdown) or "error" (what failed)."""
        tracker = self._tracker(seq)
        self.finish(seq, SequenceState.ABORTED, reason)
        self._requests.end(tracker, reason, error)

    def abandon(self, error: str) -> None:
        """This scheduler's bookkeeping failed (an engine bug): end every request it held with "error",
        trusting only its record of their ids (not its queues, its slots or its cells)."""
        for tracker in self._requests.trackers():
            seq = tracker.seq
            if seq.request_id in self._held_ids:
                seq.state, seq.finish_reason, seq.slot = SequenceState.ABORTED, "error", None
                self._requests.end(tracker, "error", error)
        self._held_ids.clear()

    def mark_computed(self, chunks: list[ScheduledChunk]) -> None:
        """The runtime wrote these chunks' KV. A drafted token's KV counts as computed only once the target
        agrees with it (keep_drafted); until then it is the sequence's ``draft_cells``."""
        for chunk in chunks:
            chunk.seq.num_computed += len(chunk.tokens) - len(chunk.draft)
            chunk.seq.draft_cells = len(chunk.draft)

    def keep_drafted(self, seq: Sequence) -> None:
        """The next drafted token was emitted: its KV is the sequence's own."""
        assert seq.draft_cells > 0, seq
        seq.num_computed += 1
        seq.draft_cells -= 1

    def drop_drafted(self, seq: Sequence) -> None:
        """Forget the KV of the drafted tokens not (yet) kept: the runtime drops their positions and the
        cells are free again."""
        if seq.draft_cells == 0 or seq.slot is None:
            seq.draft_cells = 0
            return
        cells, seq.draft_cells = seq.draft_cells, 0
        self.kv.give_back(seq.slot, cells)
        assert self.speculation is not None
        self.speculation.trim_slot(seq.slot, seq.num_computed)

    def finish(self, seq: Sequence, state: SequenceState, reason: str) -> None:
        """Retire a sequence (finished or aborted), wherever it is, and free its slot. Its computed KV is
        parked in the prefix cache unless it failed ("error": its KV may be what failed)."""
        if seq.is_running:
            self.running.remove(seq)
            if reason != "error":
                self.drop_drafted(seq)  # the prefix cache gets the emitted tokens' KV only
            seq.draft_cells = 0
            if reason != "error" and seq.num_computed > 0:
                self.cells.park(seq)
            self.cells.free_slot(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._held_ids.discard(seq.request_id)
        seq.state = state
        seq.finish_reason = reason

    # --- internals -------------------------------------------------------------------------------

    def _tracker(self, seq: Sequence) -> RequestTracker:
        tracker = self._requests.get(seq.request_id)
        assert tracker is not None, f"request {seq.request_id} is scheduled but not registered"
        return tracker

    def _take(self, seq: Sequence, tokens: int) -> ScheduledChunk:
        ids = seq.pending_ids(tokens)
        assert len(ids) == tokens, (seq, tokens)
        self.cells.allocate(seq, tokens)
        return ScheduledChunk(seq, ids, seq.num_computed, want_logits=tokens == seq.num_pending,
                              all_logits=seq.wants_position_logits)

    def _make_room(self, seq: Sequence, tokens: int, out: SchedulerOutput) -> bool:
        """Preempt the newest running sequences until ``tokens`` cells are free; False if ``seq`` itself
        had to go. Sequences already scheduled this step are never victims (their chunks are built)."""
        scheduled = {id(c.seq) for c in out.chunks}
        self.cells.evict_cached(tokens)
        while self.cells.free < tokens:
            victim = next((s for s in reversed(self.running) if id(s) not in scheduled), None)
            if victim is None:
                return False
            self._preempt(victim, out)
            if victim is seq:
                return False
            self.cells.evict_cached(tokens)  # the victim's borrowed prefix may be evictable now
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.cells.free_slot(seq)
        seq.num_computed = 0
        seq.draft_cells = 0
        seq.state = SequenceState.PREEMPTED
        seq.preemptions += 1
        self.preemptions_total += 1
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def _slot_free(self) -> bool:
        return len(self.running) < self.config.max_running and self.slots.available > 0

    def _admit(self, seq: Sequence) -> Sequence:
        seq.slot = self.slots.acquire()
        seq.state = SequenceState.PREFILLING
        self.running.append(seq)
        # A request that wants its prompt's logprobs (echo) computes every prompt position: no cached prefix.
        if not seq.wants_position_logits:
            self.cells.borrow_prefix(seq)
        return seq
