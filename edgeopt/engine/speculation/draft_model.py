"""Drafting with a small model: a second llama.cpp runtime, with its own KV, proposes each speculating
sequence's next k tokens; the target verifies them in its ordinary step (edgeopt.engine.speculation.verify).

Each engine slot has a draft sequence id of the same number. The draft's KV is kept in step with the target by
what it was fed: before proposing, the longest common prefix of the tokens the draft slot holds and the
sequence's tokens stays, the rest of the draft KV is trimmed (rejected guesses) and the missing tokens (the
target's corrections, a new prompt) are fed. A slot that changed hands (a finished or preempted sequence's
slot given to another) is emptied first. So no hook into the scheduler is needed, and a draft that goes wrong
(no free cells) only costs the step its drafts: the target decodes as if none were proposed.

All speculating sequences draft together: one draft pass catches every one of them up, then k - 1 one-token
passes carry them all. At temperature 0 the draft proposes its own greedy tokens; when sampling it draws from
its distribution q (the request's temperature and truncation over the draft's logits) and keeps q's rows for
the acceptance rule (edgeopt.engine.speculation.draft_verify).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from edgeopt.engine.sampler import greedy
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation.distribution import draw_from, truncated_softmax
from edgeopt.errors import ConfigError
from edgeopt.speculation_modes import DEFAULT_DRAFT_TOKENS
from edgeopt.runtimes.base import Runtime, StepInput

log = logging.getLogger(__name__)
MAX_DRAFT_TOKENS = 16
PASS_COST_DECAY = 0.9  # weight of past draft passes in the measured cost of one


@dataclass
class Proposal:
    tokens: list[int]
    probs: list[np.ndarray] | None  # q's row for each token (sampled drafts); None: greedy proposals


@dataclass
class _DraftSlot:
    owner: Sequence | None = None
    fed: list[int] | None = None  # the tokens whose KV the draft slot holds


def check_draft_tokens(tokens: int) -> None:
    if not 1 <= tokens <= MAX_DRAFT_TOKENS:
        raise ConfigError(f"--draft-tokens {tokens} is out of range", f"use 1..{MAX_DRAFT_TOKENS}")


def check_draft_model(draft: DraftModel | None, target: Runtime, max_running: int) -> None:
    """A draft model must hold a draft sequence for every sequence the engine runs at once."""
    if draft is not None and draft.max_sequences < max_running:
        raise ConfigError(f"the draft model {draft.name} holds {draft.max_sequences} sequences and the engine runs "
                          f"{max_running} at once", "size the draft runtime with as many slots as the target's "
                          "(edgeopt serve --draft does) or lower --max-concurrency")


class DraftModel:
    """A draft runtime whose slots mirror the target engine's, and how many tokens it drafts a step."""

    def __init__(self, runtime: Runtime, draft_tokens: int = DEFAULT_DRAFT_TOKENS, name: str = "draft",
                 relative_cost: float = 1.0) -> None:
        """``relative_cost``: a draft pass's cost in target passes until one is timed (serve: the ratio of the two
        models' weight bytes, what a memory-bound pass costs)."""
        check_draft_tokens(draft_tokens)
        if not relative_cost > 0.0:
            raise ConfigError(f"relative_cost={relative_cost} is invalid", "pass the draft's weights / the target's")
        self.relative_cost = relative_cost
        self.runtime = runtime
        self.draft_tokens = draft_tokens
        self.name = name
        self._slots = [_DraftSlot() for _ in range(runtime.info.max_slots)]
        self.failures = 0  # draft passes that failed (their steps went on without drafts)
        # Seconds a draft pass of one or two tokens per sequence takes (decayed mean; None: none timed yet),
        # for the controller's auto mode to weigh what drafting costs against what it gains.
        self.pass_seconds: float | None = None

    @property
    def max_sequences(self) -> int:
        return len(self._slots)

    def unread_tokens(self, seq: Sequence) -> int:
        """Tokens of ``seq`` the draft would have to read before drafting for it (all, for a new sequence)."""
        slot = self._slots[seq.slot] if seq.slot is not None else None
        if slot is None or slot.owner is not seq or slot.fed is None:
            return seq.num_tokens
        return max(seq.num_tokens - len(slot.fed), 1)

    def tokens_left(self, seq: Sequence) -> int:
        """Tokens the draft can still propose for ``seq`` within its own context (it holds all but the last
        drafted token)."""
        return self.runtime.info.context_length - seq.num_tokens + 1

    def propose(self, seqs: list[Sequence], counts: list[int]) -> list[Proposal]:
        """``counts[i]`` drafted tokens for ``seqs[i]`` (each running in a slot); empty proposals when the draft
        runtime fails (logged: the target then decodes without drafts this step)."""
        try:
            return self._propose(seqs, counts)
        except Exception:
            self.failures += 1
            log.warning("the draft model failed to propose (step goes on without drafts)", exc_info=True)
            for seq in seqs:  # its KV may be half-written: start these slots again next time
                self._slots[seq.slot].owner = None  # type: ignore[index]
            return [Proposal([], None) for _ in seqs]

    def _propose(self, seqs: list[Sequence], counts: list[int]) -> list[Proposal]:
        proposals = [Proposal([], None if s.params.temperature == 0.0 else []) for s in seqs]
        rows = self._catch_up(seqs)
        active = list(range(len(seqs)))
        for _ in range(max(counts, default=0)):
            for i in active:
                token = self._choose(rows[i], seqs[i], proposals[i])
                proposals[i].tokens.append(token)
            active = [i for i in active if len(proposals[i].tokens) < counts[i]]
            if not active:
                break
            batch = []
            for i in active:
                slot = self._slots[seqs[i].slot]
                assert slot.fed is not None
                batch.append(StepInput(seqs[i].slot, [proposals[i].tokens[-1]], len(slot.fed), want_logits=True))
                slot.fed.append(proposals[i].tokens[-1])
            logits = self._timed_step(batch)
            rows = dict(zip(active, logits))
        return proposals

    def _timed_step(self, batch: list[StepInput]) -> np.ndarray:
        """A draft pass; a short one (at most two tokens per sequence: a decode-like pass) is timed."""
        started = time.perf_counter()
        logits = self.runtime.step(batch)
        if all(len(item.tokens) <= 2 for item in batch):
            seconds = time.perf_counter() - started
            self.pass_seconds = seconds if self.pass_seconds is None else (
                PASS_COST_DECAY * self.pass_seconds + (1 - PASS_COST_DECAY) * seconds)
        return logits

    @staticmethod
    def _choose(row: np.ndarray, seq: Sequence, proposal: Proposal) -> int:
        if proposal.probs is None:
            return greedy(row)
        q = truncated_softmax(np.where(np.isnan(row), -np.inf, row.astype(np.float64)), seq.params)
        proposal.probs.append(q)
        return draw_from(q, seq.rng)

    def _catch_up(self, seqs: list[Sequence]) -> dict[int, np.ndarray]:
        """Bring each sequence's draft slot to hold all its tokens but the last, feed the missing ones in
        passes of at most the runtime's batch, and return each sequence's logits row after its last token."""
        pending: dict[int, tuple[list[int], int]] = {}  # index -> (tokens still to feed, position of the first)
        for i, seq in enumerate(seqs):
            ids = seq.all_ids
            kept = self._keep_common_prefix(seq, ids)
            pending[i] = (ids[kept:], kept)
        rows: dict[int, np.ndarray] = {}
        budget = self.runtime.max_batch_tokens or sum(len(t) for t, _ in pending.values())
        while pending:
            batch, taken, room = [], [], budget
            for i, (tokens, start) in pending.items():
                if room <= 0:
                    break
                piece = tokens[:room]
                last = len(piece) == len(tokens)
                batch.append(StepInput(seqs[i].slot, piece, start, want_logits=last))
                taken.append((i, len(piece), last))
                room -= len(piece)
            logits = self._timed_step(batch)
            at = 0
            for i, n, last in taken:
                tokens, start = pending.pop(i)
                fed = self._slots[seqs[i].slot].fed
                assert fed is not None
                fed.extend(tokens[:n])
                if last:
                    rows[i] = logits[at]
                    at += 1
                else:
                    pending[i] = (tokens[n:], start + n)
        return rows

    def _keep_common_prefix(self, seq: Sequence, ids: list[int]) -> int:
        """Trim the draft slot of ``seq`` to the longest prefix it shares with ``ids``, keeping at least the
        last token to feed (its logits are needed); returns how many positions it keeps."""
        assert seq.slot is not None
        slot = self._slots[seq.slot]
        if slot.owner is not seq or slot.fed is None:
            self._forget(seq.slot)
            slot.owner, slot.fed = seq, []
            return 0
        fed = slot.fed
        limit = min(len(fed), len(ids) - 1)
        kept = 0
        while kept < limit and fed[kept] == ids[kept]:
            kept += 1
        if kept < len(fed):
            if kept == 0:
                self.runtime.release(seq.slot)
            else:
                self.runtime.trim(seq.slot, kept)
            del fed[kept:]
        return kept

    def _forget(self, slot_id: int | None) -> None:
        if slot_id is None:
            return
        slot = self._slots[slot_id]
        slot.owner, slot.fed = None, None
        self.runtime.release(slot_id)

    def close(self) -> None:
        self.runtime.close()
