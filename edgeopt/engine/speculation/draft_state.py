"""One sequence's drafting evidence, and what a draft is worth at the acceptance it shows: a drafted token is
only emitted if every one before it was, so k tokens drafted at acceptance a gain a + a^2 + ... + a^k. The
controller (:mod:`edgeopt.engine.speculation.controller`) weighs that gain against the pass's added cost."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeopt.engine.speculation.ngram import NgramIndex

PRIOR_ACCEPTED, PRIOR_REJECTED = 1.0, 1.0  # a new sequence's acceptance starts at 0.5 on little evidence


@dataclass
class DraftState:
    """One sequence's drafting state: its n-gram index and decayed outcome counts."""

    index: NgramIndex
    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED
    idle_steps: int = 0  # decode steps since it last verified a draft model's proposal
    # n-gram: the draft a sequence was not given, scored against what it emits next (SpeculationController._score_unsent)
    unsent: list[int] = field(default_factory=list)
    unsent_at: int = 0  # tokens the sequence had emitted when it was looked up
    unsent_misses: int = 0  # lookups in a row that found nothing or guessed the first token wrong
    lookup_at: int = 0  # no lookup for an unsent draft before the sequence has emitted this many tokens
    # A draft model's sampled proposal: q's row for each drafted token (None: greedy or n-gram drafts)
    draft_probs: list[np.ndarray] | None = None

    @property
    def acceptance(self) -> float:
        return self.accepted / (self.accepted + self.rejected)


def expected_gain(acceptance: float, tokens: int) -> float:
    """Expected drafted tokens emitted out of ``tokens``: a + a^2 + ... + a^tokens."""
    return sum(acceptance ** i for i in range(1, tokens + 1))


def best_draft_length(acceptance: float, costs: list[float]) -> int:
    """The k whose expected gain most exceeds ``costs[k - 1]`` (0 when none does)."""
    best_k, best_net, gain, term = 0, 0.0, 0.0, 1.0
    for k, cost in enumerate(costs, 1):
        term *= acceptance
        gain += term
        if gain - cost > best_net:
            best_k, best_net = k, gain - cost
    return best_k
