"""The fourth format's size estimate (pure Python, as the planner needs it)."""

from __future__ import annotations

from edgeopt.sources.model_spec import ModelSpec

BYTES_PER_WEIGHT = {"fp32": 4, "fp16": 2, "8da4w": 0.5}


def estimate_bytes(spec: ModelSpec, quant: str) -> int:
    return int(spec.num_parameters * BYTES_PER_WEIGHT[quant])
