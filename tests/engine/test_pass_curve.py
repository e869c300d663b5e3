"""A decode pass's time by its tokens (edgeopt.engine.speculation.pass_curve): the start-up measurement between and
past its sizes, corrected by the steps served."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeopt.engine.speculation.pass_curve import MIN_SERVED, REDRAW_EVERY, PassCurve

MEASURED = {1: 0.010, 2: 0.016, 5: 0.026, 8: 0.038}


def test_between_and_past_the_measured_sizes() -> None:
    curve = PassCurve(MEASURED)
    assert curve.seconds(1) == 0.010 and curve.seconds(2) == 0.016
    assert curve.seconds(3) == pytest.approx(0.016 + 0.010 / 3)  # on the line between 2 and 5
    assert curve.seconds(11) == pytest.approx(0.038 + 3 * 0.004)  # past 8: the last segment's slope
    assert PassCurve({1: 0.010, 2: 0.009, 3: 0.012}).seconds(2) == 0.010  # never cheaper for more tokens
    with pytest.raises(ValueError, match="two sizes"):
        PassCurve({1: 0.010})


def test_served_steps_price_their_size_and_scale_the_others_to_the_load_now() -> None:
    curve = PassCurve(MEASURED)
    for _ in range(MIN_SERVED - 1):
        curve.observe(1, 0.020)
    assert curve.seconds(1) == 0.010  # too few steps to stand for the size yet
    curve.observe(1, 0.020)
    assert curve.seconds(1) == pytest.approx(0.020)  # the host is twice as busy as at start...
    assert curve.seconds(5) == pytest.approx(0.052)  # ...so the sizes it has not served cost twice as much
    for _ in range(MIN_SERVED):
        curve.observe(16, 0.140)  # 16 sequences in one step: their own price, not the start-up curve's
    assert curve.seconds(16) == pytest.approx(0.140)
    assert curve.seconds(12) == pytest.approx(0.076 + (0.140 - 0.076) * 4 / 8)


def test_a_token_costs_at_least_the_start_up_curves_cheapest_even_past_flat_served_sizes() -> None:
    curve = PassCurve(MEASURED)  # the flattest segment: 2 -> 5, 0.010 / 3 a token
    for _ in range(MIN_SERVED):
        curve.observe(8, 0.060)  # 8 sequences at a busy moment...
        curve.observe(16, 0.060)  # ...and 16 at a quieter one: their means alone say 16 cost what 8 did
    least = 0.010 / 3 * (0.060 / 0.038)  # scaled to the load now, as the sizes not served are
    assert curve.seconds(16) == pytest.approx(0.060 + 8 * least)
    assert curve.seconds(17) - curve.seconds(16) == pytest.approx(least)  # a draft on a full batch is not free


def test_the_curve_is_redrawn_every_few_steps_not_every_step() -> None:
    curve = PassCurve(MEASURED)
    for _ in range(MIN_SERVED):
        curve.observe(1, 0.010)
    assert curve.seconds(1) == pytest.approx(0.010)
    drawn = curve.version
    for _ in range(REDRAW_EVERY - 1):
        curve.observe(1, 0.030)  # the load changes: priced as before until the next drawing...
        assert curve.seconds(1) == pytest.approx(0.010) and curve.version == drawn
    curve.observe(1, 0.030)
    assert curve.seconds(1) > 0.020 and curve.version == drawn + 1  # ...which follows it


def test_a_size_below_the_served_ones_keeps_a_positive_price_when_served_steps_grow_steeper() -> None:
    """4 sequences' steps and 8's, much steeper between them than at start; then one sequence is left. The served
    slope carried down to 1 token went below zero, priced the pass at 0 and failed the step dividing by it."""
    curve = PassCurve(MEASURED)
    for _ in range(MIN_SERVED):
        curve.observe(4, 0.030)
        curve.observe(8, 0.080)
    at_4 = 0.016 + 0.010 * 2 / 3  # the start-up curve at 4 tokens
    assert curve.seconds(1) == pytest.approx(0.010 * 0.030 / at_4)  # the start-up time at the load now
    assert 0.0 < curve.seconds(1) < curve.seconds(2) < curve.seconds(4) == pytest.approx(0.030)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8, 16]), st.floats(1e-5, 1.0)), max_size=80))
def test_any_served_steps_price_every_size_above_zero_and_never_cheaper_for_more_tokens(steps) -> None:
    """The controller divides by a pass's price: whatever the host did to the steps served, none is zero."""
    curve = PassCurve(MEASURED)
    for tokens, seconds in steps:
        curve.observe(tokens, seconds)
    prices = [curve.seconds(tokens) for tokens in range(1, 30)]
    assert all(price > 0.0 for price in prices)
    assert all(a <= b for a, b in zip(prices, prices[1:]))
