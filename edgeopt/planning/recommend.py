"""Which candidate a plan recommends, and what a plan that fits nothing (or a chosen row that does not fit) says:
by how much it misses, and what would make it fit."""

from __future__ import annotations

from edgeopt import backends
from edgeopt.errors import DoesNotFitError
from edgeopt.planning.plan import Candidate, Plan
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import MIB, after_margin


def recommend(candidates: list[Candidate], profile: DeviceProfile) -> Candidate | None:
    """The profile's default quant if it fits; otherwise the largest (best quality) that fits.

    Defaults are chosen per device for speed: on bandwidth-bound boards fewer bits decode faster,
    so we do not climb to F16 just because memory would allow it.
    """
    preferred = [c for c in candidates if c.format == profile.preferred_format and c.fits]
    default = next((c for c in preferred if c.quant == profile.default_quant), None)
    if default is not None:
        return default
    default_size = next((c.weight_bytes for c in candidates if c.quant == profile.default_quant), None)
    smaller = [c for c in preferred if default_size is None or c.weight_bytes <= default_size]
    pool = smaller or preferred or [c for c in candidates if c.fits]
    return max(pool, key=lambda c: c.weight_bytes) if pool else None


def require_fit(plan: Plan) -> Candidate:
    """The recommended candidate, or a DoesNotFitError saying by how much the smallest misses."""
    if plan.recommended is not None:
        return plan.recommended
    smallest = min(plan.candidates, key=lambda c: c.weight_bytes)
    if smallest.kv_bytes_per_token == 0:  # an encoder: weights and overhead alone
        raise DoesNotFitError(
            f"{plan.model} does not fit {plan.target} even at {smallest.label}: {_shortfall(plan, smallest)}",
            "pick a larger --target or a smaller encoder")
    raise DoesNotFitError(
        f"{plan.model} does not fit {plan.target} even at {smallest.label}: {_shortfall(plan, smallest)}",
        "lower --context or --concurrency, " + _kv_hint(smallest) + "pick a larger --target, or prune with --fit",
    )


def refuse_unfit(plan: Plan, chosen: Candidate) -> None:
    """``edgeopt optimize`` writes no candidate its own plan marks as not fitting, unless told to
    (``--ignore-fit``): a user who asked for a quant or a size learns by how much it misses first."""
    if chosen.fits:
        return
    raise DoesNotFitError(
        f"{plan.model} as {chosen.label} does not fit {plan.target} (the plan marks it 'fits: no'): "
        f"{_shortfall(plan, chosen)}",
        "pick a smaller --quant or --size, lower --context or --concurrency, " + _kv_hint(chosen) +
        "or pass --ignore-fit to write it anyway")


def _shortfall(plan: Plan, candidate: Candidate) -> str:
    """What ``candidate`` needs against what the target has, in words."""
    usable = after_margin(plan.usable_memory_bytes)
    if candidate.kv_bytes_per_token == 0:  # an encoder: weights and overhead alone
        needed = candidate.weight_bytes + candidate.overhead_bytes
        return f"needs {needed / MIB:.0f} MiB, {usable / MIB:.0f} MiB usable"
    needed = (candidate.weight_bytes + candidate.overhead_bytes
              + candidate.kv_bytes_per_token * plan.context * plan.concurrency)
    return (f"needs {needed / MIB:.0f} MiB for {plan.concurrency} x {plan.context} tokens, "
            f"{(needed - usable) / MIB:.0f} MiB more than the {usable / MIB:.0f} MiB usable")


def _kv_hint(candidate: Candidate) -> str:
    """Suggest the smallest KV type when the candidate's runtime has it and does not use it yet."""
    smallest = "q4_0"
    usable = smallest in backends.backend(candidate.format).serving.kv_cache_types and candidate.kv_type != smallest
    return f"store the KV cache in 4 bits (--kv-type {smallest}), " if usable else ""
