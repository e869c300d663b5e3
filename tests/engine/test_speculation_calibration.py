"""The decode pass's cost is measured at engine start, and speculation's cost model starts from it."""

from __future__ import annotations

import time

import pytest

from edgeopt.engine import SamplingParams
from edgeopt.engine.speculation.calibration import CALIBRATION_SIZES, measure_pass_cost
from edgeopt.engine.speculation.step_cost import PRIOR_PER_TOKEN_RATIO
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

FIXED_S, PER_TOKEN_S = 0.020, 0.008  # a device where one more token costs 0.4 of a pass's fixed part


class TimedRuntime(FakeRuntime):
    """A pass takes FIXED_S + PER_TOKEN_S per token it carries."""

    def step(self, batch):  # type: ignore[no-untyped-def]
        time.sleep(FIXED_S + PER_TOKEN_S * sum(len(item.tokens) for item in batch))
        return super().step(batch)


def test_the_passes_give_the_per_token_ratio_and_leave_the_slot_empty() -> None:
    runtime = TimedRuntime()
    cost = measure_pass_cost(runtime)
    assert cost is not None
    assert cost.per_token_ratio == pytest.approx(PER_TOKEN_S / FIXED_S, rel=0.25)
    assert cost.fixed_seconds == pytest.approx(FIXED_S, rel=0.25)
    assert list(cost.curve) == list(CALIBRATION_SIZES)  # each size's own time, for the controller to price drafts by
    for tokens, seconds in cost.curve.items():
        assert seconds == pytest.approx(FIXED_S + PER_TOKEN_S * tokens, rel=0.25)
    assert runtime.kv_used_tokens == 0 and not runtime.violations


def test_an_engine_that_speculates_starts_from_the_measured_cost_and_one_that_does_not_measures_nothing() -> None:
    engine, runtime = make_engine(TimedRuntime(), speculative="ngram")

    async def body(e):  # type: ignore[no-untyped-def]
        out = await e.add_request("a", [65, 66, 67], SamplingParams(max_tokens=3, temperature=0.0)).collect()
        assert out.finish_reason == "length"

    run_engine(engine, body)
    cost = engine._speculation.controller.cost
    assert cost.prior_ratio == pytest.approx(PER_TOKEN_S / FIXED_S, rel=0.25) != PRIOR_PER_TOKEN_RATIO
    assert not runtime.violations

    engine, runtime = make_engine(TimedRuntime(), speculative="off")
    run_engine(engine, body)
    assert runtime.batch_tokens == [3, 1, 1]  # the request's own passes, nothing timed before them


class StallingRuntime(FakeRuntime):
    """Two passes in three stall, as llama.cpp's threads do when another process takes a core."""

    passes = 0

    def step(self, batch):  # type: ignore[no-untyped-def]
        self.passes += 1
        time.sleep(0.05 if self.passes % 3 else 0.001)
        return super().step(batch)


def test_timings_that_disagree_are_not_used() -> None:
    runtime = StallingRuntime()
    assert measure_pass_cost(runtime) is None
    assert runtime.kv_used_tokens == 0 and not runtime.violations


def test_a_runtime_alike_reuses_the_cost_measured_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model swapped back in is a runtime with the same pass_cost_key: its passes are not timed again (on Gemma
    3 270M that was 2.5 s of every swap back); another key is measured."""
    from edgeopt.engine.speculation import calibration
    from edgeopt.engine.speculation.step_cost import StepCostModel

    monkeypatch.setattr(calibration, "_MEASURED", {})
    first = TimedRuntime()
    first.pass_cost_key = ("model.gguf", 2)
    first_cost = StepCostModel()
    calibration.calibrate(first_cost, first)
    assert first.steps > 0 and first_cost.prior_fixed_seconds is not None

    again = TimedRuntime()
    again.pass_cost_key = ("model.gguf", 2)
    again_cost = StepCostModel()
    calibration.calibrate(again_cost, again)
    assert again.steps == 0
    assert (again_cost.prior_fixed_seconds, again_cost.prior_ratio) == (first_cost.prior_fixed_seconds,
                                                                        first_cost.prior_ratio)

    other = TimedRuntime()
    other.pass_cost_key = ("model.gguf", 1)  # another thread count: its own passes
    calibration.calibrate(StepCostModel(), other)
    assert other.steps > 0
    unkeyed = TimedRuntime()  # a runtime that names no key is measured every time
    calibration.calibrate(StepCostModel(), unkeyed)
    assert unkeyed.steps > 0
