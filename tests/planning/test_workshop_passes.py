"""The passes' memory in the optimize's plan: distillation is fitted to the workstation (gradient checkpointing
first, then smaller micro-batches with the global batch kept), and what cannot fit is refused with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.planning import CheckpointSource, Compression, OptimizeRequest, WorkshopRequest, plan_for
from edgeopt.planning.workshop.passes import fit_distil
from edgeopt.profiles.workstation import Workstation
from edgeopt.sources.model_spec import load_model_spec

GIB = 2**30


def _workstation(free_gib: float) -> Workstation:
    return Workstation(available_bytes=int(free_gib * GIB), gflops=50.0, cores=2, cpu="test")


def test_distillation_takes_checkpointing_then_smaller_micro_batches_to_fit(tiny_model_factory) -> None:
    spec = load_model_spec(str(tiny_model_factory("llama-gqa")))
    roomy, estimate = fit_distil(spec, spec, {"steps": 10}, 64 * GIB, 50.0)
    assert roomy == {"steps": 10} and estimate.name == "pass distil"
    # a budget between the checkpointed and the full figure: checkpointing alone
    full = estimate.anonymous_bytes
    _, checkpointed = fit_distil(spec, spec, {"steps": 10, "grad_checkpointing": True}, 64 * GIB, 50.0)
    assert checkpointed.anonymous_bytes < full
    params, fitted = fit_distil(spec, spec, {"steps": 10}, checkpointed.anonymous_bytes, 50.0)
    assert params == {"steps": 10, "grad_checkpointing": True} and fitted == checkpointed
    # less still: the micro-batch halves, the accumulation doubles (the global batch stays 8 sequences)
    params, smaller = fit_distil(spec, spec, {"steps": 10}, checkpointed.anonymous_bytes - 1, 50.0)
    assert params["batch_size"] * params["grad_accum"] == 8 and params["batch_size"] < 8
    assert smaller.anonymous_bytes < checkpointed.anonymous_bytes


def test_a_distillation_that_cannot_fit_is_refused_naming_the_step(tiny_model_factory, tmp_path: Path) -> None:
    model = tiny_model_factory("llama-gqa")
    data = tmp_path / "train.txt"
    data.write_text("the quick brown fox jumps over the lazy dog\n" * 2000)
    request = OptimizeRequest(format="gguf", quant="Q4_K_M", output=tmp_path / "out",
                              compression=Compression(prune=0.25, distil_data=data),
                              workshop=WorkshopRequest(_workstation(0.05)))
    with pytest.raises(ConfigError, match="pass distil|pass prune") as refused:
        plan_for(CheckpointSource(str(model)), "jetson-orin-nano-8gb", request)
    assert "--no-distil" in str(refused.value) or "--prune" in str(refused.value)
    planned = plan_for(CheckpointSource(str(model)), "jetson-orin-nano-8gb",
                       OptimizeRequest(format="gguf", quant="Q4_K_M", output=tmp_path / "out",
                                       compression=Compression(prune=0.25, distil_data=data),
                                       workshop=WorkshopRequest(_workstation(32))))
    assert [step.name for step in planned.workshop.steps][:2] == ["pass prune", "pass distil"]
    assert [name for name, _ in planned.passes] == ["prune", "distil"]
