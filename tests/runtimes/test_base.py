"""edgeopt.runtimes.base.rows_for_step: which inputs are decoded together, and the order of the rows."""

from __future__ import annotations

from edgeopt.runtimes.base import StepInput, rows_for_step


def _record(batch: list[StepInput]) -> tuple[list[str], list[list[int]]]:
    together: list[list[int]] = []

    def decode_together(items: list[StepInput]) -> list[str]:
        together.append([item.slot for item in items])
        return [f"group:{item.slot}" for item in items]

    rows = rows_for_step(batch, decode_together, lambda item: f"alone:{item.slot}")
    return rows, together


def test_warm_single_token_inputs_are_decoded_together_in_batch_order() -> None:
    batch = [StepInput(slot=0, tokens=[5], start_pos=9, want_logits=True),
             StepInput(slot=1, tokens=[1, 2, 3], start_pos=0, want_logits=True),  # a prefill
             StepInput(slot=2, tokens=[7], start_pos=4, want_logits=True),
             StepInput(slot=3, tokens=[8], start_pos=0, want_logits=True)]  # a 1-token prompt: cold slot
    rows, together = _record(batch)
    assert together == [[0, 2]]
    assert rows == ["group:0", "alone:1", "group:2", "alone:3"]


def test_a_lone_decode_runs_alone_and_unwanted_rows_are_dropped() -> None:
    batch = [StepInput(slot=0, tokens=[5], start_pos=9, want_logits=True),
             StepInput(slot=1, tokens=[1, 2], start_pos=0, want_logits=False)]  # a prefill chunk
    rows, together = _record(batch)
    assert together == [] and rows == ["alone:0"]
