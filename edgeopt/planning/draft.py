"""``edgeopt plan MODEL --draft DRAFT``: the plan of ``edgeopt serve MODEL --draft DRAFT`` with the same flags,
the draft model's weights, runtime and KV taken from the budget first (edgeopt.sizing.draft), so the target's
KV capacity shown is what it keeps beside the draft."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.planning.plan import Plan, candidate_from_shape
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import MIB, memory_pool
from edgeopt.sizing.draft import DraftPlan, shape_beside_draft
from edgeopt.sizing.shape import ShapeRequest
from edgeopt.sources.gguf_model import gguf_metadata
from edgeopt.sources.model_source import open_model_source
from edgeopt.speculation_modes import DEFAULT_DRAFT_TOKENS, longest_draft


@dataclass(frozen=True)
class PlanBesideDraft:
    plan: Plan  # the target's, in the pool the draft leaves
    draft: DraftPlan

    @property
    def total_bytes(self) -> int | None:
        """What serve holds resident with the draft; None when the target's row has no resident figure."""
        rows = self.plan.candidates
        if not rows or rows[0].resident is None:
            return None
        return rows[0].resident.total_bytes + self.draft.total_bytes

    def describe_total(self) -> str:
        return f"serve holds {(self.total_bytes or 0) / MIB:.0f} MiB resident with the draft"

    def to_dict(self) -> dict[str, Any]:
        return self.plan.to_dict() | {"draft": self.draft.to_dict()}


def plan_beside_draft(model: Path, draft: Path, profile: DeviceProfile, context: int | None = None,
                      concurrency: int | None = None, memory_bytes: int | None = None, kv_type: str | None = None,
                      draft_tokens: int = DEFAULT_DRAFT_TOKENS) -> PlanBesideDraft:
    source, draft_source = open_model_source(model, verify=False), open_model_source(draft, verify=False)
    request = ShapeRequest(context=context, max_sequences=concurrency, kv_type=kv_type,
                           draft_rows=longest_draft("draft", draft_tokens))
    shape, draft_plan = shape_beside_draft(source.bundle_dir, source.manifest, request, draft_source.bundle_dir,
                                           draft_source.manifest, draft_tokens, memory_bytes, profile, refuse=False)
    served_context = context or shape.context_length
    # Fits: -n sequences at full context, or (no -n, serve's default) one, the others sharing the cells.
    candidate = candidate_from_shape(source.manifest.format, source.manifest.quant, shape, served_context,
                                     concurrency or 1, encoder=False)
    pool = memory_pool(None if memory_bytes is not None else profile, memory_bytes)
    fits = candidate.fits and candidate.resident is not None
    parameters = gguf_metadata(source.bundle_dir / source.manifest.model_file).parameter_count
    return PlanBesideDraft(Plan(str(model), profile.name, pool.bytes, served_context, shape.max_sequences, [candidate],
                                candidate if fits else None, parameters=parameters), draft_plan)
