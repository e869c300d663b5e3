"""A plan and its rows: each candidate format:quant as ``edgeopt serve`` would size it on the target (the serving
shape's sizing and the resident memory it reaches), and which one is recommended."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgeopt import backends
from edgeopt.sizing.resident import ResidentMemory, resident_memory
from edgeopt.sizing.shape import ServingShape


@dataclass(frozen=True)
class Candidate:
    format: str
    quant: str
    weight_bytes: int
    kv_type: str | None  # gguf: f16, q8_0 or q4_0 (edgeopt.sizing.kv_types); None: the format's one fixed KV dtype
    # gguf: the KV layout `serve` picks by default (--kv-layout auto, prefix cache on; edgeopt.sizing.shape);
    # None: the format has one
    kv_layout: str | None
    kv_bytes_per_token: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_token_capacity: int
    max_concurrency: int
    fits: bool
    # What `serve` holds resident in this shape: weights, KV cells by purpose, runtime buffers, the process
    # (edgeopt.sizing.resident); None for rows not sized as a serving shape.
    resident: ResidentMemory | None = None

    @property
    def label(self) -> str:
        return f"{self.format}:{self.quant}"


@dataclass(frozen=True)
class Plan:
    model: str
    target: str
    usable_memory_bytes: int
    context: int
    concurrency: int
    candidates: list[Candidate]
    recommended: Candidate | None
    parameters: int = 0  # of the model planned, for the plan's heading (not in its JSON)

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["parameters"]
        data["recommended"] = self.recommended.label if self.recommended else None
        for row, candidate in zip(data["candidates"], self.candidates):  # with the totals asdict leaves out
            row["resident"] = candidate.resident.to_dict() if candidate.resident else None
        return data


def candidate_from_shape(fmt: str, quant: str, shape: ServingShape, context: int, concurrency: int,
                         encoder: bool) -> Candidate:
    """A plan's row for the shape ``edgeopt serve`` would decide. Encoders keep no KV cache: their capacity is
    meaningless, and fitting is weights + overhead alone."""
    sizing = shape.sizing
    fits = sizing.kv_budget_bytes >= 0 if encoder else sizing.kv_fit_tokens >= context * concurrency
    return Candidate(
        format=fmt, quant=quant, weight_bytes=sizing.weights_bytes, kv_type=shape.kv_type,
        kv_layout=None if encoder else shape.kv_layout, kv_bytes_per_token=sizing.kv_bytes_per_token,
        overhead_bytes=sizing.overhead_bytes, kv_budget_bytes=sizing.kv_budget_bytes,
        kv_token_capacity=sizing.kv_fit_tokens, max_concurrency=sizing.kv_fit_tokens // context, fits=fits,
        resident=resident_memory(backends.backend(fmt), shape),
    )
