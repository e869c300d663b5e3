"""The speculation verifier on its own: the walk over a drafted chunk's rows, what it tells the scheduler
(keep, drop, append, fail) and in which order, and what it teaches the controller."""

from __future__ import annotations

import numpy as np

from edgeopt.engine.api import SamplingParams, TokenLogprob
from edgeopt.engine.scheduled import Pick, ScheduledChunk, SchedulerOutput
from edgeopt.engine.sequence import Sequence, SequenceState
from edgeopt.engine.speculation import SpeculationController
from edgeopt.engine.speculation.verify import DraftVerifier

VOCAB = 16


class Ledger:
    """Records the calls; ends the sequence when ``finish_on`` is appended; raises when ``broken_on`` is."""

    def __init__(self, finish_on: int | None = None, broken_on: int | None = None) -> None:
        self.calls: list[tuple[str, int | str]] = []
        self.finish_on, self.broken_on = finish_on, broken_on

    def keep_drafted(self, seq: Sequence) -> None:
        self.calls.append(("keep", seq.request_id))

    def drop_drafted(self, seq: Sequence) -> None:
        self.calls.append(("drop", seq.request_id))

    def append_token(self, seq: Sequence, token: int, logprob: TokenLogprob | None = None) -> None:
        if token == self.broken_on:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "detokenizer broke")
        self.calls.append(("append", token))
        if token == self.finish_on:
            seq.state = SequenceState.FINISHED

    def fail(self, seq: Sequence, exc: Exception) -> None:
        self.calls.append(("fail", type(exc).__name__))


def drafted_step(draft: tuple[int, ...]) -> tuple[SchedulerOutput, np.ndarray, Sequence]:
    """One decode chunk feeding token 1 then ``draft``, and its all-zero rows (rows_picking sets each pick)."""
    seq = Sequence("s", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=32))
    chunk = ScheduledChunk(seq, [1, *draft], start_pos=3, want_logits=True, all_logits=True, draft=draft)
    return SchedulerOutput([chunk]), np.zeros((len(draft) + 1, VOCAB), dtype=np.float32), seq


def argmax_draw(row: np.ndarray, seq: Sequence) -> Pick:
    return Pick(int(np.argmax(row)))


def rows_picking(logits: np.ndarray, picks: list[int]) -> np.ndarray:
    for i, token in enumerate(picks):
        logits[i, token] = 10.0
    return logits


def test_the_walk_keeps_agreeing_drafts_then_drops_the_rest_before_the_first_disagreement_is_appended() -> None:
    out, logits, _ = drafted_step((5, 6, 7))
    verifier, ledger = DraftVerifier(SpeculationController("ngram")), Ledger()
    verifier.verify(out, rows_picking(logits, [5, 6, 9, 11]), argmax_draw, ledger)
    assert ledger.calls == [("keep", "s"), ("append", 5), ("keep", "s"), ("append", 6), ("drop", "s"), ("append", 9)]
    assert verifier.counters.snapshot() == {"ngram": (3, 2)}


def test_every_draft_accepted_gives_the_bonus_row_and_a_finished_sequence_stops_the_walk() -> None:
    out, logits, _ = drafted_step((5, 6))
    verifier, ledger = DraftVerifier(SpeculationController("ngram")), Ledger()
    verifier.verify(out, rows_picking(logits, [5, 6, 8]), argmax_draw, ledger)
    assert ledger.calls[-2:] == [("drop", "s"), ("append", 8)] and verifier.counters.snapshot() == {"ngram": (2, 2)}

    out, logits, _ = drafted_step((5, 6))
    ledger = Ledger(finish_on=5)  # a stop condition at the first drafted token ends the walk there
    DraftVerifier(SpeculationController("ngram")).verify(out, rows_picking(logits, [5, 6, 8]), argmax_draw, ledger)
    assert ledger.calls == [("keep", "s"), ("append", 5)]


def test_a_failure_while_applying_fails_only_that_request_and_teaches_nothing() -> None:
    out, logits, _ = drafted_step((5, 6))
    verifier, ledger = DraftVerifier(SpeculationController("ngram")), Ledger(broken_on=6)
    verifier.verify(out, rows_picking(logits, [5, 6, 8]), argmax_draw, ledger)
    assert ledger.calls == [("keep", "s"), ("append", 5), ("keep", "s"), ("fail", "UnicodeDecodeError")]
    assert verifier.counters.snapshot() == {}
