"""One step as the scheduler decided it, and what sampling hands back to apply it.

The scheduler (:mod:`edgeopt.engine.scheduler`) builds a :class:`SchedulerOutput`; the engine feeds its
chunks to the runtime as one batch; the step sampler (:mod:`edgeopt.engine.step_sampler`) returns one
:class:`Pick` (or the exception that row raised) per sampling sequence; the scheduler applies those picks,
and the speculation verifier (:mod:`edgeopt.engine.speculation.verify`) walks the drafted chunks' rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from edgeopt.engine.request_output import TokenLogprob
from edgeopt.engine.sequence import Sequence
from edgeopt.runtimes.base import StepInput


@dataclass(frozen=True)
class ScheduledChunk:
    seq: Sequence
    tokens: list[int]
    start_pos: int
    want_logits: bool
    all_logits: bool = False  # every position's logits (prompt logprobs); see StepInput.all_logits
    # Speculation: tokens[1:] are guesses fed after the pending token, each with its logits row (all_logits);
    # edgeopt.engine.speculation.verify keeps the ones the target agrees with.
    draft: tuple[int, ...] = ()


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(c.tokens) for c in self.chunks)

    # (The properties below run once or twice a step over every chunk: plain expressions, no call per chunk.)

    @property
    def sampled(self) -> list[Sequence]:
        """The sequences that draw one token each from this step's sampling rows, in row order (a drafted
        chunk's rows are verified instead, by edgeopt.engine.speculation.verify)."""
        return [c.seq for c in self.chunks if c.want_logits and not c.draft]

    @property
    def drafted(self) -> list[ScheduledChunk]:
        return [c for c in self.chunks if c.draft]

    @property
    def prefill_tokens(self) -> int:
        """Prefill work: prompt chunks and recomputation after preemption (anything but a 1-token decode).
        A drafted chunk's guesses are decode work (the speculation counters count them)."""
        return sum(len(c.tokens) for c in self.chunks
                   if not c.draft and (len(c.tokens) > 1 or c.start_pos < len(c.seq.prompt_ids)))

    @property
    def decode_only(self) -> bool:
        """Every chunk feeds one pending token (plus its draft, if any): a pass the step-cost model learns from."""
        return all(len(c.tokens) - len(c.draft) == 1 for c in self.chunks)

    def runtime_batch(self) -> list[StepInput]:
        return [StepInput(c.seq.slot, c.tokens, c.start_pos, c.want_logits, c.all_logits) for c in self.chunks]


class Pick(NamedTuple):  # a tuple: one is made per sampling row per step, the cheapest immutable record
    """A sampling sequence's token this step, and its logprob when the request asked for logprobs."""

    token: int
    logprob: TokenLogprob | None = None
