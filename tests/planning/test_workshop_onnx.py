"""The ONNX export in the optimize's plan: each step holds float32 copies of the model (torch's, the traced graph's,
onnxruntime's), so a workstation without room for them is refused before the export, pointing at GGUF, whose steps
map the model file instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.planning import CheckpointSource, OptimizeRequest, WorkshopRequest, plan_for
from edgeopt.planning.workshop.onnx_path import EXPORT, OnnxSteps, plan_onnx_export
from edgeopt.profiles.workstation import Workstation
from edgeopt.sources.model_spec import load_model_spec

GIB = 2**30


def _request(tmp_path: Path, quant: str, free_gib: float, **workshop: object) -> OptimizeRequest:
    return OptimizeRequest(format="onnx", quant=quant, output=tmp_path / "out",
                           workshop=WorkshopRequest(Workstation(int(free_gib * GIB), 50.0, 2, "test"), **workshop))


def test_the_onnx_steps_are_planned_from_the_float32_size(tiny_model_factory, tmp_path: Path) -> None:
    model = tiny_model_factory("llama-gqa")
    planned = plan_for(CheckpointSource(str(model)), "jetson-orin-nano-8gb", _request(tmp_path, "int4", 32))

    names = [step.name for step in planned.workshop.steps]
    assert names == ["ONNX export in float32", "check against torch", "fusions", "quantization to int4",
                     "check against the export"]
    assert planned.workshop.not_planned == ()
    spec = load_model_spec(str(model))
    fp32, table = 4 * spec.num_parameters, 4 * spec.vocab_size * spec.hidden_size
    export = planned.workshop.steps[0]
    assert export.anonymous_bytes > EXPORT[0] * fp32 + EXPORT[1] * table  # the copies and the process beside them
    assert "ONNX export in float32" in "\n".join(planned.workshop.lines())


def test_int4_without_calibration_plans_no_text_and_fp32_no_quantization(tiny_model_factory) -> None:
    spec = load_model_spec(str(tiny_model_factory("llama-gqa")))
    weighted = plan_onnx_export(spec, OnnxSteps("int4", calibrated=True, writes_text=True), 50.0)
    given_text = plan_onnx_export(spec, OnnxSteps("int4", calibrated=True, writes_text=False), 50.0)
    rounded = plan_onnx_export(spec, OnnxSteps("int4", calibrated=False, writes_text=False), 50.0)
    assert weighted.seconds > given_text.seconds > rounded.seconds
    assert [s.name for s in plan_onnx_export(spec, OnnxSteps("fp32", False, False), 50.0).steps] == [
        "ONNX export in float32", "check against torch"]


def test_a_workstation_without_room_for_the_float32_copies_is_refused_with_gguf_as_the_fix(
        tiny_model_factory, tmp_path: Path) -> None:
    model = tiny_model_factory("llama-gqa")
    with pytest.raises(ConfigError, match="ONNX export in float32|quantization to int8") as refused:
        plan_for(CheckpointSource(str(model)), "jetson-orin-nano-8gb", _request(tmp_path, "int8", 0.05))
    assert "--format gguf" in str(refused.value)
    dry = _request(tmp_path, "int8", 0.05)
    dry = OptimizeRequest(**{**dry.__dict__, "dry_run": True})
    assert plan_for(CheckpointSource(str(model)), "jetson-orin-nano-8gb", dry).workshop.steps  # shown, not refused
