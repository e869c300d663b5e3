"""One request's life inside the engine: its tokens, how many are in the KV cache, and its state.

The one invariant everything relies on: the runtime slot holds the KV of exactly the first
``num_computed`` tokens of ``all_ids``. Prefill and decode are the same operation: feed the pending
tokens ``all_ids[num_computed:]`` (a prompt chunk, or the one token sampled last step); the logits
after the last of them give the next token. Preemption drops the KV (``num_computed = 0``) and the
sequence simply prefills its prompt *and* its output so far again (recompute).
"""

from __future__ import annotations

import time
from enum import Enum

import numpy as np
import numpy.random  # numpy loads it lazily: here, at start, not inside the first request's TTFT

from edgeopt.engine.api import SamplingParams, TokenLogprob
from edgeopt.engine.constraint import TokenConstraint
from edgeopt.engine.prefix_tree import NO_HIT, SHARED_NAMESPACE, PrefixHit


def generator_seed(seed: int | None) -> int | None:
    """numpy wants a non-negative seed; OpenAI's is any int64. Two's complement maps int64 one-to-one
    onto uint64, so -1 is a seed of its own (validation refuses values outside int64)."""
    return None if seed is None else seed % 2**64


class SequenceState(str, Enum):
    WAITING = "waiting"  # queued, never ran
    PREFILLING = "prefilling"  # holds a slot, pending tokens > 1
    DECODING = "decoding"  # holds a slot, one pending token (the last sampled one)
    PREEMPTED = "preempted"  # back in the queue after losing its KV; will recompute
    FINISHED = "finished"
    ABORTED = "aborted"

    @property
    def is_done(self) -> bool:
        return self in (SequenceState.FINISHED, SequenceState.ABORTED)


class Sequence:
    def __init__(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                 arrival_s: float | None = None, cache_namespace: str = SHARED_NAMESPACE) -> None:
        self.request_id = request_id
        # Whose prefix cache entries it may borrow and whose it parks into (a tenant: edgeopt.engine.prefix_tree).
        self.cache_namespace = cache_namespace
        self.prompt_ids = list(prompt_ids)
        self.params = params
        self.arrival_s = time.monotonic() if arrival_s is None else arrival_s
        self.output_ids: list[int] = []
        self.num_computed = 0
        self.slot: int | None = None
        self.state = SequenceState.WAITING
        self.finish_reason: str | None = None
        self.preemptions = 0
        self.prefix_hit: PrefixHit = NO_HIT  # the cached prefix the slot borrowed when admitted
        self.cached_prompt_tokens: int | None = None  # prompt tokens borrowed at the first admission
        self._rng: np.random.Generator | None = None  # made on first draw (see rng)
        # Grammar state, advanced with each output token; kept through preemption (the output is kept too).
        self.constraint = TokenConstraint(params.grammar) if params.grammar is not None else None
        # echo + logprobs: one entry per prompt token, filled from the prefill's logits (the first has none)
        # Speculation: cells past num_computed holding drafted tokens' KV, kept until the target agrees with
        # them (edgeopt.engine.speculation.verify); the drafter's state (its n-gram index); and how many tokens
        # it must have emitted before drafting is considered for it again (speculation.controller: a step
        # where every sequence sleeps skips drafting at the cost of this comparison).
        self.draft_cells = 0
        self.draft_state: object | None = None
        self.draft_wake_at = 0
        self.prompt_logprobs: list[TokenLogprob | None] | None = [None] if params.prompt_logprobs is not None else None

    @property
    def rng(self) -> np.random.Generator:
        """The request's own generator: the same seed gives the same samples whatever the batch around it. Made
        on first use: an unseeded one reads the OS's entropy (~40 us), which a greedy request, drawing nothing,
        would pay on its way to its first token."""
        if self._rng is None:
            self._rng = np.random.default_rng(generator_seed(self.params.seed))
        return self._rng

    @property
    def wants_position_logits(self) -> bool:
        """The next prefill chunk must return every position's logits (prompt logprobs still missing)."""
        return self.prompt_logprobs is not None and len(self.prompt_logprobs) < len(self.prompt_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def borrowed_cells(self) -> int:
        """Cells of the slot's KV that the prefix cache is charged for (shared, not copied)."""
        return self.prefix_hit.tokens if self.prefix_hit.pinned else 0

    def pending_ids(self, limit: int) -> list[int]:
        start = self.num_computed
        if start < len(self.prompt_ids):
            return self.all_ids[start:start + limit]
        offset = start - len(self.prompt_ids)
        return self.output_ids[offset:offset + limit]

    @property
    def is_running(self) -> bool:
        return self.slot is not None

    def display_state(self) -> str:
        if self.state in (SequenceState.WAITING, SequenceState.PREEMPTED):
            return self.state.value
        return SequenceState.DECODING.value if self.num_pending <= 1 else SequenceState.PREFILLING.value

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, state={self.state.value}, tokens={self.num_tokens}, "
                f"computed={self.num_computed}, slot={self.slot})")
