"""Memory for a draft model (``edgeopt serve --draft``): its weights, its runtime's buffers and its own KV,
taken from the same pool as the target's before the target's KV is sized, so that a plan that fits with a
draft also serves with it.

    draft fixed   = draft weights + the draft runtime's buffers (its process is the target's: counted once)
    draft KV      = a cell per target live cell, plus the k drafted tokens of each sequence,
                    at the draft's KV bytes per token (its own layers and heads)
    target pool   = pool - draft fixed - draft KV

The draft's cells follow the target's shape, which follows the pool left to it, so the target is sized twice:
once to learn how many sequences and how long a context it gets, then on the pool less the draft KV of that
shape. The second shape never holds more than the first, so the draft KV reserved covers it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.errors import ConfigError
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.sizing.budget import MIB, memory_pool, require_kv_room
from edgeopt.sizing.bundle_facts import bundle_kv_facts, kv_shape, planned_bundle_shape, recorded_kv_type
from edgeopt.sizing.shape import ServingShape, ShapeRequest, served_kv_type


@dataclass(frozen=True)
class DraftPlan:
    """What the draft runtime is loaded with, and the memory it holds."""

    name: str
    weights_bytes: int
    runtime_bytes: int  # buffers and logits rows beyond the target's process
    kv_bytes_per_token: int
    kv_cells: int  # draft KV cells (llama.cpp n_ctx), shared by its sequences like the target's
    kv_type: str | None
    max_sequences: int  # one draft sequence per target sequence
    context_length: int  # longest draft sequence: the target's context and the drafted tokens past it

    @property
    def kv_bytes(self) -> int:
        return self.kv_cells * self.kv_bytes_per_token

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.runtime_bytes + self.kv_bytes

    def runtime_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"kv_capacity_tokens": self.kv_cells, "max_slots": self.max_sequences,
                                   "context_length": self.context_length, "cache_slots": 0, "kv_layout": "unified"}
        if self.kv_type is not None:
            options["kv_type"] = self.kv_type
        return options

    def describe(self) -> str:
        return (f"draft model {self.name}: {self.weights_bytes / MIB:.0f} MiB weights + {self.runtime_bytes / MIB:.0f} "
                f"MiB runtime + {self.kv_cells} KV cells ({self.kv_bytes / MIB:.0f} MiB) = {self.total_bytes / MIB:.0f} "
                f"MiB, taken from the budget before the target's KV")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"kv_bytes": self.kv_bytes, "total_bytes": self.total_bytes}


def shape_beside_draft(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, draft_dir: Path,
                       draft_manifest: Manifest, draft_tokens: int, memory_bytes: int | None = None,
                       target: str | DeviceProfile = "host", refuse: bool = True) -> tuple[ServingShape, DraftPlan]:
    """The target's serving shape in the pool a draft model leaves, and the draft's plan. ``refuse``: as serve,
    refuse a pool that holds no KV for the target (a plan reports it instead)."""
    if draft_manifest.format != "gguf" or manifest.format != "gguf":
        raise ConfigError(f"--draft pairs two llama.cpp (GGUF) models; the target is {manifest.format} and the draft "
                          f"{draft_manifest.format}", "use GGUF bundles or files for both, or leave --draft out")
    profile = target if isinstance(target, DeviceProfile) else load_profile(target)
    pool = memory_pool(None if memory_bytes is not None else profile, memory_bytes).bytes
    entry = backends.backend(draft_manifest.format)
    facts = bundle_kv_facts(draft_dir, draft_manifest)
    per_token, window = kv_shape(draft_dir, draft_manifest)
    sequences = request.max_sequences or 16
    fixed = facts.weights_bytes + max(facts.overhead_bytes(sequences) - entry.memory.process_bytes, 0)
    first = planned_bundle_shape(bundle_dir, manifest, request, pool - fixed, profile)
    shape = planned_bundle_shape(bundle_dir, manifest, request, pool - fixed - _cells(first, draft_tokens) * per_token,
                                 profile)
    if refuse:
        require_kv_room(shape.sizing)
    plan = DraftPlan(name=Path(draft_dir / draft_manifest.model_file).name, weights_bytes=facts.weights_bytes,
                     runtime_bytes=fixed - facts.weights_bytes, kv_bytes_per_token=per_token,
                     kv_cells=_cells(shape, draft_tokens),
                     kv_type=served_kv_type(entry, None, recorded_kv_type(draft_manifest)),
                     max_sequences=shape.max_sequences,
                     context_length=min(window, shape.context_length + draft_tokens))
    return shape, plan


def _cells(shape: ServingShape, draft_tokens: int) -> int:
    """A draft cell per target live cell plus each sequence's drafted tokens, never past what its sequences
    can hold at full context."""
    per_sequence = shape.context_length + draft_tokens
    return max(1, min(shape.kv_live_cells + shape.max_sequences * draft_tokens, shape.max_sequences * per_sequence))
