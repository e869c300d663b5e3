"""The decode pass's cost on this device, measured at engine start: a few timed passes of each of
CALIBRATION_SIZES tokens, from which the speculation controller's step-cost model takes its prior: the line
through 1 and 1 + CALIBRATION_DRAFT tokens, and the curve of every size, which prices each draft length.

The controller decides whether verifying k guessed tokens pays from the ratio of a pass's per-token cost to
its fixed cost. Learned from served steps alone, that ratio stays a constant guess for as long as every step
carries one token (a lone stream that has not drafted yet: the case speculation serves best), and no
constant fits every device: SmolLM2-135M on a 2-core x86 measures 0.62 (fixed part 7 ms) where the prior
says 0.15, a Pi's per-token work is dearer still, a GPU's nearly free (a 1.1B model on an H200: 0.05). Nor is
a pass's cost a line on a CPU: there the second token costs 0.6 of a pass and each one after about 0.33, so
the curve, not the line, says what a draft of k tokens costs. A handful of passes at start settle it per
device (~0.5 s for SmolLM2-135M on 2 cores).

The passes run on one slot the engine has not handed out yet, after CALIBRATION_CONTEXT positions (a short
chat's attention), each timed pass trimmed back so the next starts from the same state; the slot is released
before the engine serves. Each size keeps its fastest time (a shared host adds delays, never removes them),
and a measurement whose fastest two disagree is dropped: the prior stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass

from edgeopt.engine.speculation.step_cost import StepCostModel
from edgeopt.runtimes.base import Runtime, StepInput

log = logging.getLogger(__name__)

CALIBRATION_CONTEXT = 64  # positions the slot holds before the timed passes
CALIBRATION_DRAFT = 4  # drafted tokens of the pass the line's slope comes from (the controller's usual draft is 2-6)
# Pass sizes timed: their curve prices each draft length (StepCostModel.relative); n-gram drafts reach 10
# tokens, a pass 11, and past 8 the curve goes on at its last slope.
CALIBRATION_SIZES = (1, 2, 3, 1 + CALIBRATION_DRAFT, 8)
CALIBRATION_REPEATS = 4  # timed passes of each size (the first of each also builds its graph)
CALIBRATION_BUDGET_S = 3.0  # past this the passes stop: the device is too busy for the timings to mean much
AGREEMENT = 1.25  # each size's two fastest passes within this factor, else the timings are noise


@dataclass(frozen=True)
class PassCost:
    fixed_seconds: float  # a decode pass's cost that does not grow with its tokens
    per_token_ratio: float  # one more token's cost, in units of fixed_seconds
    curve: dict[int, float]  # tokens -> the fastest pass of that many, seconds (CALIBRATION_SIZES)


def measure_pass_cost(runtime: Runtime, slot: int = 0) -> PassCost | None:
    """Time passes of 1 and 1 + CALIBRATION_DRAFT tokens on ``slot`` (free, and released again here); None
    when the timings cannot be trusted (the passes ran past CALIBRATION_BUDGET_S, or a size's two fastest
    disagree: llama.cpp's threads stall at their barriers when another process takes a core). The runtime
    must trim a running slot's KV (speculation needs that anyway: RuntimeInfo.trims_kv)."""
    token = _plain_token(runtime)
    deadline = time.perf_counter() + CALIBRATION_BUDGET_S
    times: dict[int, list[float]] = {tokens: [] for tokens in CALIBRATION_SIZES}
    try:
        runtime.step([StepInput(slot, [token] * CALIBRATION_CONTEXT, 0, want_logits=False)])
        for _ in range(CALIBRATION_REPEATS):
            for tokens, taken in times.items():
                if time.perf_counter() > deadline:
                    return None
                started = time.perf_counter()
                runtime.step([StepInput(slot, [token] * tokens, CALIBRATION_CONTEXT, want_logits=True,
                                        all_logits=tokens > 1)])
                taken.append(time.perf_counter() - started)
                runtime.trim(slot, CALIBRATION_CONTEXT)
    finally:
        runtime.release(slot)
    fastest = {tokens: sorted(taken)[:2] for tokens, taken in times.items()}
    if any(second > first * AGREEMENT for first, second in fastest.values()):
        return None
    one, longer = fastest[1][0], fastest[1 + CALIBRATION_DRAFT][0]
    per_token = max(longer - one, 0.0) / CALIBRATION_DRAFT
    fixed = max(one - per_token, 1e-9)  # a pass of one token = fixed + one token's work
    return PassCost(fixed, per_token / fixed, {tokens: taken[0] for tokens, taken in fastest.items()})


# Costs measured in this process, by the runtime's pass_cost_key: a model swapped back in is a runtime alike, and
# timing its passes again cost 2.5 s of each swap back on Gemma 3 270M (its 1 MiB logits rows). A cost measured
# on a host busier then than now is corrected from served steps (price_probe.py, pass_curve.py) either way.
_MEASURED: dict[Hashable, PassCost] = {}


def calibrate(cost: StepCostModel, runtime: Runtime) -> None:
    """Give the controller's step-cost model this device's decode-pass cost before the engine serves (on the
    engine thread): measured, or what a runtime alike measured in this process; a measurement that fails or
    cannot be trusted leaves the prior in place."""
    key = runtime.pass_cost_key
    measured = _MEASURED.get(key) if key is not None else None
    if measured is not None:
        cost.set_prior(measured.fixed_seconds, measured.per_token_ratio, measured.curve)
        log.info("speculation: the decode pass's cost measured for this model earlier in this process is reused")
        return
    try:
        measured = measure_pass_cost(runtime)
    except Exception as exc:  # noqa: BLE001 - a measurement, not the service: the prior stays
        log.warning("speculation: timing the decode pass failed (%s); the controller keeps its prior", exc)
        return
    if measured is None:
        log.info("speculation: the decode pass's timings varied too much to use (a busy device); the "
                 "controller starts from its prior and learns from the steps it serves")
        return
    if key is not None:
        _MEASURED[key] = measured
    cost.set_prior(measured.fixed_seconds, measured.per_token_ratio, measured.curve)
    one = measured.curve[1]
    log.info("speculation: a decode pass of 1 token takes %.1f ms on this device; of %s tokens %s times that",
             one * 1000, "/".join(str(n) for n in list(measured.curve)[1:]),
             "/".join(f"{t / one:.2f}" for t in list(measured.curve.values())[1:]))


def _plain_token(runtime: Runtime) -> int:
    """A token that is neither BOS nor EOS (a runtime may treat those apart from text)."""
    special = set(runtime.info.eos_token_ids) | {runtime.info.bos_token_id}
    return next(t for t in range(runtime.info.vocab_size // 2, runtime.info.vocab_size) if t not in special)
