"""``edgeopt optimize``'s decisions before any work: the format, the quant, the KV cache type and the pass list
(prune and distil from the flags, --fit's ratio, --draft-for's recipe), all on the plan of the model as the
passes will leave it. The optimize pipeline runs what this decides; it decides nothing again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.byte_sizes import Size, refuse_above
from edgeopt.errors import ConfigError, UnsupportedArchitectureError
from edgeopt.planning.checkpoint import check_encoder_formats, encoder_formats, size_candidate, weight_bytes
from edgeopt.planning.plan import Candidate, Plan
from edgeopt.planning.recommend import refuse_unfit, require_fit
from edgeopt.planning.quants import canonical_quant
from edgeopt.planning.draft_recipe import DraftRecipe, draft_recipe
from edgeopt.planning.fit import plan_after_passes
from edgeopt.planning.pass_list import compression_passes
from edgeopt.planning.requests import Compression, OptimizeRequest
from edgeopt.planning.workshop import WorkshopPlan, plan_workshop, refuse_unheld
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.sources.model_spec import ModelSpec, load_model_spec


@dataclass
class OptimizePlan:
    """What optimize writes, decided: the plan of the model after its passes, and the chosen row."""

    profile: DeviceProfile
    plan: Plan
    format: str
    quant: str
    runtime: str
    output: Path  # the bundle directory to write
    chosen: Candidate  # the plan's row for format:quant (fits or not: --ignore-fit, --dry-run)
    passes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # in order, --fit's prune included
    fit_ratio: float | None = None  # the prune ratio --fit chose, None when it was not needed
    kv_type: str | None = None  # the gguf bundle's KV cache type, recorded in its manifest; None: other formats
    source_parameters: int = 0  # parameters of the model as given, before any pass (what the plan prints beside it)
    draft_recipe: DraftRecipe | None = None  # --draft-for: the draft's shape against its target's
    workshop: WorkshopPlan | None = None  # the optimize's own steps on this workstation (request.workshop given)


def plan_optimize(model: str, profile: DeviceProfile, request: OptimizeRequest) -> OptimizePlan:
    flagged = None if request.draft else flagged_passes(request.compression, request.fit)
    spec = load_model_spec(model)
    parameters = spec.num_parameters  # the model as given, before any pass
    recipe = draft_recipe(spec, request.compression) if request.draft else None
    passes = recipe.passes if recipe else flagged or []
    fmt = request.format or (encoder_formats()[0] if spec.is_encoder else "gguf" if request.draft
                             else profile.preferred_format)
    if spec.is_encoder:
        check_encoder_options(spec, fmt, passes, request.fit)
    asked_quant = canonical_quant(fmt, request.quant) if request.quant else None  # any case; canonical from here on
    if request.size is not None:
        asked_quant = sized_quant(fmt, asked_quant, request.size.bytes)
        check_mix_size(spec, request.size, fmt)
    asked_kv_type = parse_kv_type(request.kv_type, fmt) if request.kv_type else None
    fitted = plan_after_passes(spec, profile, fmt, asked_quant, request.context, request.concurrency, passes,
                               request.fit, kv_type=asked_kv_type)
    plan = fitted.plan
    if asked_quant:
        chosen = next((c for c in plan.candidates if c.quant == asked_quant), None)
        if chosen is None:  # the user may ask for any quant the format knows, not only the planner's shortlist
            chosen = size_candidate(fitted.spec, profile, fmt, asked_quant, plan.context, plan.concurrency,
                                    kv_type=asked_kv_type,
                                    file_bytes=request.size.bytes if request.size is not None else None)
            plan.candidates.append(chosen)
    else:
        chosen = require_fit(plan)
    if not (request.ignore_fit or request.dry_run):
        refuse_unfit(plan, chosen)
    entry = backends.backend(fmt)
    name = Path(model.rstrip("/")).name
    output = request.output or Path(f"{name}{'-draft' if request.draft else ''}-{profile.name}-{chosen.quant.lower()}")
    workshop, passes = None, fitted.passes
    if request.workshop is not None:
        workshop, passes = plan_workshop(spec, fitted.spec, fmt, chosen.quant, fitted.passes, request.workshop)
        if not request.dry_run:  # a dry run shows the plan whatever the machine holds
            refuse_unheld(workshop, request.workshop, fmt, chosen.quant)
    return OptimizePlan(profile, plan, fmt, chosen.quant, entry.runtime, output, chosen, passes, fitted.fit_ratio,
                        kv_type=chosen.kv_type if entry.serving.kv_cache_types else None,
                        source_parameters=parameters, draft_recipe=recipe, workshop=workshop)


def flagged_passes(flags: Compression, fit: bool) -> list[tuple[str, dict[str, Any]]]:
    return compression_passes(flags.prune, flags.prune_heads, flags.prune_mlp, flags.prune_layers, flags.distil,
                              flags.distil_data, flags.distil_steps, fit)


def sized_quant(fmt: str, asked_quant: str | None, size_bytes: int) -> str:
    """The quant ``--size`` makes (each tensor's type chosen to fit it), refused with a format that has
    none or beside another ``--quant``."""
    sized = backends.backend(fmt).quants.sized
    size = f"--size {size_bytes / 2**20:.0f}MiB"
    if not sized:
        raise ConfigError(f"{size}: --format {fmt} has no per-tensor mix made to a size",
                          f"use --format {next(f for f in backends.formats() if backends.backend(f).quants.sized)}, "
                          "or drop --size and pick a --quant")
    if asked_quant not in (None, sized):
        raise ConfigError(f"{size} chooses every tensor's type itself; it cannot be combined with --quant {asked_quant}",
                          f"drop --quant (or pass --quant {sized}), or drop --size")
    return sized


def check_mix_size(spec: ModelSpec, size: Size, fmt: str = "gguf") -> None:
    """A GGUF mix larger than the model in F16 cannot be meant (every tensor would stay F16 and the rest be empty):
    refused, naming the bytes a bare number's digits would be. An ONNX file carries more than its weights (graph,
    fp32 norms and scales; most of a tiny model's file), so there the exporter judges the size it can reach."""
    if fmt == "gguf":
        refuse_above(size, weight_bytes(spec, "gguf", "F16"), "--size", f"{spec.source} in F16")


def check_encoder_options(spec: ModelSpec, fmt: str, passes: list[tuple[str, dict[str, Any]]], fit: bool) -> None:
    """Encoders go to ONNX unpruned: prune/distil/--fit know decoder blocks only."""
    check_encoder_formats(spec, (fmt,))
    asked = [name for name, _ in passes] + (["fit"] if fit else [])
    if asked:
        raise UnsupportedArchitectureError(
            f"{spec.source} is an encoder ({spec.hf_architecture}); {asked[0]!r} works on causal LMs only",
            "drop --prune*/--distil/--fit for encoders; --quant int8 is how an encoder gets smaller")
