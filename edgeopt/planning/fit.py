"""``--fit``: find the smallest prune ratio whose pruned model fits the target (arithmetic only, no torch).

The planner already knows whether a ModelSpec fits a device at a given format, quant, context and
concurrency; pruning changes only the spec. So we scan ratios in small steps, plan each pruned spec,
and keep the first that fits. A scan instead of a bisection because the rounding of head counts and
MLP widths to kernel-friendly multiples makes "fits" not strictly monotonic in the ratio.

Also here: the plan of the model *after* the requested passes, which is what the quant choice and
the user-facing plan must describe when ``--prune`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.errors import DoesNotFitError, EdgeoptError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.planning.prune_shape import MAX_RATIO, PruneRequest, pruned_spec
from edgeopt.planning.checkpoint import make_plan
from edgeopt.planning.plan import Plan
from edgeopt.sizing.budget import MIB
from edgeopt.profiles import DeviceProfile

RATIO_STEP = 0.01
PRUNE_KNOBS = ("ratio", "heads", "mlp", "layers")


@dataclass(frozen=True)
class FitResult:
    plan: Plan
    passes: list[tuple[str, dict[str, Any]]]
    fit_ratio: float | None  # the ratio --fit chose, None when it was not needed or not asked
    spec: ModelSpec  # the spec after pruning (the input spec when nothing is pruned)


def request_from_params(params: dict[str, Any]) -> PruneRequest:
    return PruneRequest(**{k: params.get(k) for k in PRUNE_KNOBS})


def plan_fits(plan: Plan, quant: str | None) -> bool:
    if quant is None:
        return plan.recommended is not None
    return any(c.quant == quant and c.fits for c in plan.candidates)


def fit_prune_ratio(spec: ModelSpec, profile: DeviceProfile, fmt: str, quant: str | None, context: int | None,
                    concurrency: int, base: PruneRequest | None = None,
                    kv_type: str | None = None) -> tuple[float, ModelSpec]:
    """Smallest ratio (in RATIO_STEP steps) at which the pruned spec fits; DoesNotFitError if none does."""
    base = base or PruneRequest()
    steps = int(round(MAX_RATIO / RATIO_STEP))
    for i in range(1, steps + 1):
        ratio = round(i * RATIO_STEP, 4)
        request = PruneRequest(ratio=ratio, heads=base.heads, mlp=base.mlp, layers=base.layers)
        try:
            candidate = pruned_spec(spec, request)
        except EdgeoptError:  # this ratio cannot be shaped (too few layers left): try a larger one
            continue
        if plan_fits(make_plan(candidate, profile, context, concurrency, formats=(fmt,), kv_type=kv_type), quant):
            return ratio, candidate
    smallest = pruned_spec(spec, PruneRequest(ratio=MAX_RATIO))
    plan = make_plan(smallest, profile, context, concurrency, formats=(fmt,), kv_type=kv_type)
    least = min(c.weight_bytes for c in plan.candidates)
    raise DoesNotFitError(
        f"{spec.source} does not fit {profile.name} even pruned by {MAX_RATIO:.0%} "
        f"({least / MIB:.0f} MiB of weights, {plan.usable_memory_bytes / MIB:.0f} MiB usable)",
        "pick a larger --target, lower --context/--concurrency, or start from a smaller model")


def plan_after_passes(spec: ModelSpec, profile: DeviceProfile, fmt: str, quant: str | None, context: int | None,
                      concurrency: int, passes: list[tuple[str, dict[str, Any]]], fit: bool,
                      kv_type: str | None = None) -> FitResult:
    """Plan the model as the passes will leave it; with ``fit``, add or raise pruning until it fits.
    ``kv_type``: the gguf KV cache type asked for (None: the planner's rule)."""
    passes = [(name, dict(params)) for name, params in passes]
    prune_at = next((i for i, (name, _) in enumerate(passes) if name == "prune"), None)
    prune_params = passes[prune_at][1] if prune_at is not None else {}
    request = request_from_params(prune_params)
    after = pruned_spec(spec, request) if prune_at is not None else spec
    plan = make_plan(after, profile, context, concurrency, formats=(fmt,), kv_type=kv_type)
    if not fit or plan_fits(plan, quant):
        if prune_at is None:  # distillation recovers what pruning lost; nothing pruned, nothing to recover
            passes = [(name, params) for name, params in passes if name != "distil"]
        return FitResult(plan, passes, None, after)
    ratio, after = fit_prune_ratio(spec, profile, fmt, quant, context, concurrency, base=request, kv_type=kv_type)
    new_params = {**prune_params, "ratio": ratio}
    if prune_at is None:
        distil = next((params for name, params in passes if name == "distil"), {})
        if distil.get("data"):  # calibrate importance on the same text the distillation uses
            new_params.update(calib_data=distil["data"], calib_sha256=distil.get("data_sha256"))
        passes.insert(0, ("prune", new_params))
    else:
        passes[prune_at] = ("prune", new_params)
    return FitResult(make_plan(after, profile, context, concurrency, formats=(fmt,), kv_type=kv_type), passes,
                     ratio, after)
