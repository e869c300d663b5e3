"""The optimize's own plan (issue 60): before any work, each step's peak memory and expected time on this
workstation, from the checkpoint's shape and the workstation's measured rate (edgeopt.profiles.workstation), the
distillation settings that fit it, and the refusal of a run whose step cannot fit the memory the machine has free."""

from __future__ import annotations

from typing import Any

from edgeopt.planning.requests import WorkshopRequest
from edgeopt.planning.workshop.estimate import StepEstimate, WorkshopPlan
from edgeopt.planning.workshop.gguf_path import GgufSteps, plan_gguf_export
from edgeopt.planning.workshop.onnx_path import OnnxSteps, plan_onnx_export
from edgeopt.planning.workshop.passes import fit_distil, plan_prune
from edgeopt.sources.model_spec import ModelSpec

__all__ = ["StepEstimate", "WorkshopPlan", "plan_workshop", "refuse_unheld"]

Passes = list[tuple[str, dict[str, Any]]]


def plan_workshop(before: ModelSpec, after: ModelSpec, fmt: str, quant: str, passes: Passes,
                  request: WorkshopRequest) -> tuple[WorkshopPlan, Passes]:
    """The steps for ``before`` (the checkpoint) made into ``after`` by ``passes`` and exported as ``fmt``
    ``quant``, and the passes with the distillation settings that fit this workstation. An export not planned
    yet (torch) is named in ``not_planned``."""
    workstation = request.workstation
    steps: list[StepEstimate] = []
    fitted: Passes = []
    for name, params in passes:
        if name == "prune":
            steps.append(plan_prune(before, after, workstation.gflops))
        elif name == "distil":
            params, estimate = fit_distil(after, before, params, workstation.available_bytes, workstation.gflops)
            steps.append(estimate)
        fitted.append((name, params))
    if fmt == "gguf":
        from edgeopt.formats.gguf.quants import uses_imatrix

        export = GgufSteps(quant, uses_imatrix(quant), request.calibration_text_bytes, request.self_calibration,
                           request.evaluate)
        steps += plan_gguf_export(after, export, workstation.gflops).steps
    elif fmt == "onnx":
        onnx_steps = OnnxSteps(quant.lower(), request.int4_calibration,
                               request.calibration_text_bytes is None and request.self_calibration)
        steps += plan_onnx_export(after, onnx_steps, workstation.gflops).steps
    else:
        return WorkshopPlan(tuple(steps), (f"the {fmt} export",)), fitted
    return WorkshopPlan(tuple(steps)), fitted


def refuse_unheld(plan: WorkshopPlan, request: WorkshopRequest, fmt: str, quant: str) -> None:
    """Refuse, before any work, a run whose most demanding step needs more memory of its own than the
    workstation has free, with what takes memory off that step of what the flags still allow."""
    from edgeopt.formats.gguf.quants import uses_imatrix

    worst = plan.largest_own
    if worst is None:
        return
    if worst.name == "pass distil":
        fixes = ["pass --no-distil", "prune more (a smaller student)"]
    elif worst.name == "pass prune":
        fixes = ["drop --prune/--fit, or prune a smaller checkpoint"]
    elif fmt == "onnx":  # every step holds float32 copies of the model
        fixes = ["pass --format gguf (its steps map the model file and hold no float32 copy)",
                 "prune to a smaller model first (--prune)"]
    else:
        fixes = ["pass --no-eval (the evaluation maps the reference beside its buffers)"] if request.evaluate else []
        if request.calibration_text_bytes is None and request.self_calibration:
            fixes.append("pass --no-self-calibration (no text written by the model, no importance matrix)")
        if uses_imatrix(quant):
            fixes.append("pass --quant Q8_0 (no importance matrix)")
    plan.refuse_beyond(request.workstation.available_bytes, fixes)
