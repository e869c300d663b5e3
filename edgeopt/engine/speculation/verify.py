"""Walk one sequence's verified block: draw each token from the target, keep drafted KV while they agree.

A speculating sequence fed ``[last, d1, .., dk]`` at positions p .. p+k and got k + 1 logits rows: row i is
the target's next-token distribution after ``d1 .. di``. Row 0 is drawn exactly as an ordinary decode step
would draw it (same processed logits: penalties over the same history, logit_bias, grammar mask, same
generator). While the drawn token equals the drafted one, the drafted token's KV is the target's own and is
kept, and the next row is the next step's distribution, drawn the same way; the first disagreement (or the
last row, a bonus token) ends the walk, and the KV of the drafted tokens after it is dropped.

So every emitted token is a draw from the target's processed distribution given the tokens before it: at
temperature 0 the output is the one plain decoding gives; when sampling it has plain decoding's
distribution (a deterministic draft accepted with the target's probability of that token is exactly
rejection sampling with a one-point draft distribution), and with a seed it draws the same numbers in the
same order, so it gives the same tokens. Stop strings, max_tokens and a complete grammar end the walk where
they end the request: its remaining drafted KV is dropped before the sequence finishes, so the prefix cache
only ever keeps the KV of emitted tokens.

A draft model's sampled drafts (a distribution q behind each guess) are judged by speculative sampling's
rule instead (edgeopt.engine.speculation.draft_verify).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.scheduled import Pick, ScheduledChunk, SchedulerOutput
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation.controller import SpeculationController
from edgeopt.engine.speculation.counters import SpeculationCounters
from edgeopt.engine.speculation.draft_verify import verify_sampled_block

log = logging.getLogger(__name__)
Draw = Callable[[np.ndarray, Sequence], Pick]  # one row drawn as an ordinary step draws it (StepSampler.draw)
PLAIN_OBSERVED_EVERY = 4


class DraftLedger(Protocol):
    """What the walk changes in the scheduler: drafted KV kept or dropped, and tokens applied."""

    def keep_drafted(self, seq: Sequence) -> None: ...

    def drop_drafted(self, seq: Sequence) -> None: ...

    def append_token(self, seq: Sequence, token: int, logprob: TokenLogprob | None = None) -> None: ...

    def fail(self, seq: Sequence, exc: Exception) -> None: ...


class DraftVerifier:
    """Verifies a step's drafted chunks and teaches the controller from the outcome and the pass's time."""

    def __init__(self, controller: SpeculationController) -> None:
        self.controller = controller
        self.counters = SpeculationCounters()
        self._plain_steps = 0

    def observe_step(self, out: SchedulerOutput, seconds: float, drafted: bool) -> None:
        """The step's time, for the step-cost model: scheduling, the pass, sampling, verifying the drafted rows
        and streaming, all that a drafted token adds to (on a GPU, where a 1.1B model's pass takes 1.7 ms, a
        drafted step's Python cost more than its pass). Decode steps only: a verify's few tokens cost far more
        each than a long prefill's (measured on SmolLM2 Q4_1, 1 thread: 4 tokens 2.7x one, 128 tokens 25x),
        so prefills would mislead the fit. A step without drafts is observed one in PLAIN_OBSERVED_EVERY: its
        time differs little from the next one's, and on a fast model (0.5 ms a step) observing every one cost
        about 1% of the decode."""
        if not drafted:
            self._plain_steps += 1
            if self._plain_steps % PLAIN_OBSERVED_EVERY:
                return
        if out.decode_only:
            self.controller.observe_step(out.num_tokens, seconds)

    def verify(self, out: SchedulerOutput, logits: np.ndarray, draw: Draw, ledger: DraftLedger) -> None:
        """Emit the target's tokens from each drafted chunk's rows of the step's ``logits`` (draft_blocks); a
        grammar, detokenizer or stop-string failure fails only its request."""
        for chunk, block in zip(out.drafted, draft_blocks(out.chunks, logits), strict=True):
            seq = chunk.seq
            if seq.state.is_done:  # the step failed it already
                continue
            probs = seq.draft_state.draft_probs if seq.draft_state is not None else None  # type: ignore[attr-defined]
            try:
                if probs is not None:  # the draft model sampled these: speculative sampling's rule
                    accepted = verify_sampled_block(seq, chunk.draft, probs, block, draw, ledger)
                else:
                    accepted = verify_block(seq, chunk.draft, block, draw, ledger)
            except Exception as exc:
                log.exception("verifying the draft of request %s failed", seq.request_id)
                if not seq.state.is_done:
                    ledger.fail(seq, exc)
                continue
            self.controller.record(seq, len(chunk.draft), accepted)
            self.counters.record(self.controller.source, len(chunk.draft), accepted)


def verify_block(seq: Sequence, draft: tuple[int, ...], rows: np.ndarray, draw: Draw, ledger: DraftLedger) -> int:
    """Draw and append tokens from ``rows`` (len(draft) + 1 of them) until one differs from the draft, the
    rows run out or the sequence finishes; returns how many drafted tokens were emitted."""
    assert len(rows) == len(draft) + 1, (len(rows), draft)
    accepted = 0
    for i, row in enumerate(rows):
        pick = draw(row, seq)
        follows = i < len(draft) and pick.token == draft[i]
        if follows:
            ledger.keep_drafted(seq)  # the KV at this token's position is the target's own: computed
            accepted += 1
        else:
            ledger.drop_drafted(seq)  # before appending: finishing parks exactly the emitted tokens' KV
        ledger.append_token(seq, pick.token, pick.logprob)
        if not follows or seq.state.is_done:
            break
    return accepted


def draft_blocks(chunks: list[ScheduledChunk], logits: np.ndarray) -> list[np.ndarray]:
    """The logits rows of each chunk that carries a draft (len(tokens) rows each), in chunk order."""
    blocks: list[np.ndarray] = []
    at = 0
    for chunk in chunks:
        rows = len(chunk.tokens) if chunk.all_logits else int(chunk.want_logits)
        if chunk.draft:
            blocks.append(logits[at:at + rows])
        at += rows
    return blocks
