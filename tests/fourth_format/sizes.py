"""The fourth format's quants and size estimate (pure Python, as the planner needs them)."""

from __future__ import annotations

from edgeopt.sources.model_spec import ModelSpec

QUANTS = ("fp32", "fp16")
BYTES = {"fp32": 4, "fp16": 2}


def estimate_bytes(spec: ModelSpec, quant: str) -> int:
    return spec.num_parameters * BYTES[quant]
