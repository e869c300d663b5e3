"""A decode pass's time by its tokens (edgeopt.engine.speculation.pass_curve): the start-up measurement between and
past its sizes, corrected by the steps served."""

from __future__ import annotations

import pytest

from edgeopt.engine.speculation.pass_curve import MIN_SERVED, PassCurve

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
        curve.observe(16, 0.120)  # 16 sequences in one step: their own price, not the start-up curve's
    assert curve.seconds(16) == pytest.approx(0.120)
    assert curve.seconds(12) == pytest.approx(0.076 + (0.120 - 0.076) * 4 / 8)
