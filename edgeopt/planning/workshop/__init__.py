"""The optimize's own plan (issue 60): before any work, each step's peak memory and expected time on this
workstation, from the checkpoint's shape and the workstation's measured rate (edgeopt.profiles.workstation), and
the refusal of a run whose step cannot fit the memory the machine has free."""

from __future__ import annotations

from edgeopt.planning.requests import WorkshopRequest
from edgeopt.planning.workshop.estimate import StepEstimate, WorkshopPlan
from edgeopt.planning.workshop.gguf_path import GgufSteps, plan_gguf_export
from edgeopt.sources.model_spec import ModelSpec

__all__ = ["StepEstimate", "WorkshopPlan", "plan_workshop"]


def plan_workshop(spec: ModelSpec, fmt: str, quant: str, passes: list[str], request: WorkshopRequest
                  ) -> WorkshopPlan | None:
    """The export's steps for ``spec`` as the passes leave it (their own memory is not planned yet: named in
    ``not_planned``); None for a format whose export is not planned (ONNX, torch)."""
    if fmt != "gguf":
        return None
    from edgeopt.formats.gguf.quants import uses_imatrix

    steps = GgufSteps(quant, uses_imatrix(quant), request.calibration_text_bytes, request.self_calibration,
                      request.evaluate)
    plan = plan_gguf_export(spec, steps, request.workstation.gflops)
    skipped = tuple(f"pass {name}" for name in passes) + (("the --size mix's measurements",) if request.mix else ())
    return WorkshopPlan(plan.steps, skipped)
