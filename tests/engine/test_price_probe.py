"""Speculation cannot lock itself out (issue 61): a pass curve timed beside a busy neighbour prices drafts so high
that none pays; the price probe (edgeopt.engine.speculation.price_probe) verifies a short draft now and then, and
the curve (edgeopt.engine.speculation.pass_curve) redraws its shape from the served sizes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edgeopt.engine import SamplingParams
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation import SpeculationController
from edgeopt.engine.speculation.pass_curve import MIN_SERVED, PassCurve
from edgeopt.engine.speculation.price_probe import FIRST_INTERVAL, MAX_INTERVAL, PROBE_TOKENS, PriceProbe

# Timed beside a busy loop: every token after the first costs nearly a whole pass, so no draft pays.
BUSY = {1: 0.011, 2: 0.021, 3: 0.031, 5: 0.051, 8: 0.081}


def quiet(tokens: int) -> float:
    """The same device alone: a token adds 0.3 of a pass (what it adds changes 3x, within SHAPE_CHANGE)."""
    return 0.005 + 0.002 * tokens


def test_the_probe_backs_off_to_its_longest_interval() -> None:
    probe = PriceProbe()
    due_at = []
    for step in range(1, 1000):
        if probe.due():
            due_at.append(step)
            probe.probed(verified=True)
    gaps = [b - a for a, b in zip([0, *due_at], due_at)]
    assert gaps[:5] == [FIRST_INTERVAL, 2 * FIRST_INTERVAL, 4 * FIRST_INTERVAL, 8 * FIRST_INTERVAL, MAX_INTERVAL]
    assert set(gaps[4:]) == {MAX_INTERVAL} and probe.probes == len(due_at)
    probe.start_over()  # a step that drafted on its own: the run starts again, the interval stays
    assert not any(probe.due() for _ in range(MAX_INTERVAL - 1)) and probe.due()


def test_two_served_sizes_redraw_the_start_up_curve_s_shape() -> None:
    curve = PassCurve(BUSY)
    for _ in range(MIN_SERVED):
        curve.observe(1, quiet(1))
    assert curve.seconds(5) / curve.seconds(1) == pytest.approx(BUSY[5] / BUSY[1])  # one size: the level alone
    for _ in range(MIN_SERVED):
        curve.observe(3, quiet(3))  # a probe's size
    assert curve.seconds(3) == pytest.approx(quiet(3))
    # What a token adds now is what it added at start, scaled by what the served sizes say: (11-7) / (31-11) ms
    added = (quiet(3) - quiet(1)) / (BUSY[3] - BUSY[1])
    assert curve.seconds(8) == pytest.approx(quiet(1) + (BUSY[8] - BUSY[1]) * added)
    assert curve.shape()[8] == pytest.approx(curve.seconds(8) / quiet(1))


def test_a_served_size_far_off_the_shape_moves_it_only_so_far() -> None:
    curve = PassCurve(BUSY)
    for _ in range(MIN_SERVED):
        curve.observe(1, 0.011)
        curve.observe(2, 0.011)  # one noisy mean says a token adds nothing
    assert curve.seconds(5) - curve.seconds(1) >= (BUSY[5] - BUSY[1]) / 4 - 1e-12  # SHAPE_CHANGE bounds it


def copying(max_tokens: int = 5000) -> Sequence:
    document = list(range(100, 160))
    return Sequence("s", document * 3, SamplingParams(max_tokens=max_tokens, temperature=0.0))


def serve(controller: SpeculationController, seq: Sequence, steps: int,
          seconds: Callable[[int], float] = quiet) -> list[int]:
    """Decode ``steps`` steps of a sequence that goes on quoting its prompt (every draft is taken); each step is
    observed at ``seconds`` of its size. Returns each step's draft length."""
    document = seq.prompt_ids[:60]
    lengths = []
    for _ in range(steps):
        [draft] = controller.propose([seq], 0, 100, 100, splits_mixed_lengths=False)
        if draft:
            controller.record(seq, len(draft), len(draft))
        for _ in range(len(draft) + 1):
            seq.output_ids.append(document[len(seq.output_ids) % 60])
        controller.observe_step(1 + len(draft), seconds(1 + len(draft)))
        lengths.append(len(draft))
    return lengths


def test_a_lone_stream_priced_out_at_start_drafts_again_once_probes_tell_the_price() -> None:
    controller = SpeculationController("auto")
    controller.cost.set_prior(0.001, 10.0, BUSY)
    seq = copying()
    lengths = serve(controller, seq, 200)
    assert lengths[:FIRST_INTERVAL - 1] == [0] * (FIRST_INTERVAL - 1)  # priced out...
    assert lengths[FIRST_INTERVAL - 1] == PROBE_TOKENS  # ...until the first probe
    first_real = next(i for i, n in enumerate(lengths) if n > PROBE_TOKENS)
    assert first_real < FIRST_INTERVAL * (2 ** MIN_SERVED)  # once MIN_SERVED probes priced their size
    assert sum(n > 0 for n in lengths[first_real:]) > 0.9 * len(lengths[first_real:])  # and it keeps drafting
    assert controller.cost.relative(3) / controller.cost.relative(1) < 1.8  # near the quiet 11/7, far from 31/11


def test_where_the_busy_price_is_the_true_one_probes_cost_under_one_percent_of_the_steps() -> None:
    controller = SpeculationController("auto")
    controller.cost.set_prior(0.001, 10.0, BUSY)
    lengths = serve(controller, copying(5000), 3000, seconds=lambda n: BUSY[min(BUSY, key=lambda m: abs(m - n))])
    probes = sum(n > 0 for n in lengths)
    assert probes == controller.price_probe.probes <= 5 + 3000 // MAX_INTERVAL + 1
    assert probes / len(lengths) < 0.01


def test_a_sequence_whose_drafts_fail_is_not_probed() -> None:
    controller = SpeculationController("auto")
    controller.cost.set_prior(0.001, 10.0, BUSY)
    seq = copying()
    for _ in range(6):
        controller.record(seq, 3, 0)
    assert not any(controller.propose([seq], 0, 100, 100, False)[0] for _ in range(4 * FIRST_INTERVAL))
