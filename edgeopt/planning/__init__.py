"""Planning: will a model fit a target, in which format and quantization, with how much KV, after which passes
(arithmetic, no torch). One entry, :func:`plan_for`, for every question edgeopt asks before it works:

    source (sources.py)                  request (requests.py)  answer
    CheckpointSource / BundleSource /    PlanRequest            Plan             (checkpoint.py, bundle.py, gguf_file.py)
      GgufFileSource
    BesideDraft                          PlanRequest            PlanBesideDraft  (draft.py)
    AcrossDevices                        PlanRequest            DevicesPlan      (devices.py)
    CheckpointSource                     OptimizeRequest        OptimizePlan     (optimize_plan.py: format, quant, KV
                                                                                  type, pass list: pass_list.py,
                                                                                  fit.py, draft_recipe.py; the
                                                                                  optimize's own steps: workshop/)
    BundleSource / BesideDraft /         ServeRequest           ServePlan        (serve_plan.py: the serving shape)
      AcrossDevices

A checkpoint's plan is decided a piece at a time (checkpoint.py): the quant names (quants.py), every row's weights,
the memory pool, each row's serving shape (edgeopt.sizing.shape), the rows (plan.py), the recommendation
(recommend.py). Pruning's arithmetic on a config (prune_shape.py, prune_limits.py) is the passes' too: they import
it from here. model_plan.py answers the plan command's request per source.

Other packages import this package only, never its modules (tests/planning/test_one_entry.py); it imports
neither the optimize pipeline nor the engine, and reaches no torch, exporter or pass, so serve plans through it.
"""

from __future__ import annotations

from typing import Union, overload

from edgeopt.errors import ConfigError
from edgeopt.planning.checkpoint import weight_bytes
from edgeopt.planning.plan import Candidate, Plan
from edgeopt.planning.quants import canonical_quant
from edgeopt.planning.devices import DevicesPlan
from edgeopt.planning.draft import PlanBesideDraft
from edgeopt.planning.draft_recipe import DraftRecipe, check_draft_flags
from edgeopt.planning.fit import request_from_params
from edgeopt.planning.model_plan import plan_devices, plan_model, plan_pair
from edgeopt.planning.optimize_plan import OptimizePlan, plan_optimize
from edgeopt.planning.pass_list import HOLDOUT_TOKENS
from edgeopt.planning.prune_shape import PruneRequest, PruneShape, pruned_spec, shape_of, solve_shape
from edgeopt.planning.requests import Compression, OptimizeRequest, PlanRequest, ServeRequest, WorkshopRequest
from edgeopt.planning.workshop import StepEstimate, WorkshopPlan
from edgeopt.planning.serve_plan import ServePlan, plan_serving
from edgeopt.planning.sources import (AcrossDevices, BesideDraft, BundleSource, CheckpointSource, GgufFileSource,
                                      ModelSource, Source, is_bundle_dir, source_of)
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.sizing.budget import MIB

Request = Union[PlanRequest, OptimizeRequest, ServeRequest]

__all__ = [
    "MIB", "HOLDOUT_TOKENS", "AcrossDevices", "BesideDraft", "BundleSource", "Candidate", "CheckpointSource",
    "Compression", "DevicesPlan", "DraftRecipe", "GgufFileSource", "ModelSource", "OptimizePlan", "OptimizeRequest",
    "Plan", "PlanBesideDraft", "PlanRequest", "PruneRequest", "PruneShape", "ServePlan", "ServeRequest", "Source",
    "canonical_quant", "check_draft_flags", "is_bundle_dir", "plan_for", "pruned_spec", "request_from_params",
    "shape_of", "solve_shape", "source_of", "weight_bytes", "StepEstimate", "WorkshopPlan", "WorkshopRequest",
]


@overload
def plan_for(source: ModelSource, target: DeviceProfile | str, request: PlanRequest) -> Plan: ...
@overload
def plan_for(source: BesideDraft, target: DeviceProfile | str, request: PlanRequest) -> PlanBesideDraft: ...
@overload
def plan_for(source: AcrossDevices, target: DeviceProfile | str, request: PlanRequest) -> DevicesPlan: ...
@overload
def plan_for(source: CheckpointSource, target: DeviceProfile | str, request: OptimizeRequest) -> OptimizePlan: ...
@overload
def plan_for(source: Source, target: DeviceProfile | str, request: ServeRequest) -> ServePlan: ...


def plan_for(source: Source, target: DeviceProfile | str, request: Request
             ) -> Plan | PlanBesideDraft | DevicesPlan | OptimizePlan | ServePlan:
    """The plan of ``source`` on ``target`` (a profile, or its name: loaded only where the plan needs it; serve
    with --memory does not) for ``request``."""
    if isinstance(request, ServeRequest):
        return plan_serving(source, target, request)
    profile = target if isinstance(target, DeviceProfile) else load_profile(target)
    if isinstance(request, OptimizeRequest):
        if not isinstance(source, CheckpointSource):
            raise ConfigError(f"edgeopt optimize makes a bundle from a checkpoint, not {source!r}",
                              "pass a hub id or checkpoint directory")
        return plan_optimize(source.model, profile, request)
    if isinstance(source, BesideDraft):
        return plan_pair(source, profile, request)
    if isinstance(source, AcrossDevices):
        return plan_devices(source, profile, request)
    return plan_model(source, profile, request)
