"""FIFO continuous-batching scheduler: which tokens of which sequences go into the next forward pass.

Each step, within ``step_token_budget`` tokens:

1. every running sequence that is decoding contributes its one pending token (oldest first);
2. then prefill chunks (at most ``prefill_chunk`` tokens each) of running sequences still prefilling;
3. then waiting sequences are admitted in arrival order while a slot is free and the KV cells left,
   after what admitted prompts still need, hold the newcomer's whole prompt (admission control).

When a running sequence needs a KV cell and none is free, the *newest* running sequence is preempted
(its KV is dropped and it goes back to the front of the queue to recompute later). The oldest running
sequence therefore always progresses, and since every request fits the capacity alone (checked when it
arrives), the engine never deadlocks and never overdraws the cache.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from edgeopt.engine.api import EngineConfig
from edgeopt.engine.kv_budget import KvBudget, SlotPool
from edgeopt.engine.sequence import Sequence, SequenceState


@dataclass(frozen=True)
class ScheduledChunk:
    seq: Sequence
    tokens: list[int]
    start_pos: int
    want_logits: bool


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(c.tokens) for c in self.chunks)


class Scheduler:
    def __init__(self, config: EngineConfig, release_slot: Callable[[int], None]) -> None:
        self.config = config
        self.kv = KvBudget(config.kv_capacity_tokens)
        self.slots = SlotPool(config.max_running)
        self._release_slot = release_slot  # the runtime's release(): drops the slot's KV storage
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: oldest first, preemption takes the last
        self.preemptions_total = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.step_token_budget
        for seq in [s for s in self.running if s.num_pending == 1]:
            if budget == 0:
                break
            if seq.is_running and self._make_room(seq, 1, out):
                out.chunks.append(self._take(seq, 1))
                budget -= 1
        for seq in [s for s in self.running if s.num_pending > 1]:
            if budget == 0:
                break
            if seq.is_running and self._make_room(seq, 1, out):
                chunk = min(self.config.prefill_chunk, budget, seq.num_pending, self.kv.free)
                out.chunks.append(self._take(seq, chunk))
                budget -= chunk
        while budget > 0 and self.waiting and self._can_admit(self.waiting[0]):
            seq = self._admit(self.waiting.popleft())
            chunk = min(self.config.prefill_chunk, budget, seq.num_pending)
            out.chunks.append(self._take(seq, chunk))
            budget -= chunk
        return out

    def mark_computed(self, chunks: list[ScheduledChunk]) -> None:
        """The runtime wrote these chunks' KV."""
        for chunk in chunks:
            chunk.seq.num_computed += len(chunk.tokens)

    def finish(self, seq: Sequence, state: SequenceState, reason: str) -> None:
        """Retire a sequence (finished or aborted), wherever it is, and free its slot and KV."""
        if seq.is_running:
            self.running.remove(seq)
            self._free_slot(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.state = state
        seq.finish_reason = reason

    # --- internals -------------------------------------------------------------------------------

    def _take(self, seq: Sequence, tokens: int) -> ScheduledChunk:
        ids = seq.pending_ids(tokens)
        assert seq.slot is not None and len(ids) == tokens, (seq, tokens)
        self.kv.allocate(seq.slot, tokens)
        return ScheduledChunk(seq, ids, seq.num_computed, want_logits=tokens == seq.num_pending)

    def _make_room(self, seq: Sequence, tokens: int, out: SchedulerOutput) -> bool:
        """Preempt the newest running sequences until ``tokens`` cells are free; False if ``seq`` itself
        had to go. Sequences already scheduled this step are never victims (their chunks are built)."""
        scheduled = {id(c.seq) for c in out.chunks}
        while not self.kv.can_allocate(tokens):
            victim = next((s for s in reversed(self.running) if id(s) not in scheduled), None)
            if victim is None:
                return False
            self._preempt(victim, out)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self._free_slot(seq)
        seq.num_computed = 0
        seq.state = SequenceState.PREEMPTED
        seq.preemptions += 1
        self.preemptions_total += 1
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def _can_admit(self, seq: Sequence) -> bool:
        if len(self.running) >= self.config.max_running or self.slots.available == 0:
            return False
        # Cells that admitted sequences still need before they produce a token stay spoken for
        # (tokens without a cell yet: cells of chunks scheduled this step are already allocated).
        promised = sum(s.num_tokens - self.kv.held(s.slot) for s in self.running if s.slot is not None)
        return self.kv.free - promised >= seq.num_pending

    def _admit(self, seq: Sequence) -> Sequence:
        seq.slot = self.slots.acquire()
        seq.state = SequenceState.PREFILLING
        self.running.append(seq)
        return seq

    def _free_slot(self, seq: Sequence) -> None:
        assert seq.slot is not None
        self.kv.release(seq.slot)
        self._release_slot(seq.slot)
        self.slots.release(seq.slot)
        seq.slot = None
