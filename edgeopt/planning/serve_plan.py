"""``edgeopt serve``'s request: the shape a bundle is started with (decided once, here, and handed whole to the
runtime and the engine), beside a draft model or split over RPC workers, and the memory it holds resident.

One model alone: edgeopt.sizing.bundle_facts; beside a draft: edgeopt.sizing.draft; split: edgeopt.sizing.split_shape.
Encoders keep no KV cache: no shape, their weights and runtime buffers only (edgeopt.planning.bundle)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt import backends
from edgeopt.planning.bundle import encoder_resident
from edgeopt.planning.requests import ServeRequest
from edgeopt.planning.sources import AcrossDevices, BesideDraft, BundleSource, ModelSource, Source, path_of
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.bundle_facts import bundle_serving_shape, planned_bundle_shape
from edgeopt.sizing.draft import DraftPlan, shape_beside_draft
from edgeopt.sizing.resident import ResidentMemory, resident_memory
from edgeopt.sizing.shape import ServingShape
from edgeopt.sizing.split import SplitPlan
from edgeopt.sizing.split_shape import split_serving_shape
from edgeopt.sources.model_source import open_model_source
from edgeopt.speculation_modes import DEFAULT_DRAFT_TOKENS
from edgeopt.store.bundle import Manifest


@dataclass(frozen=True)
class ServePlan:
    shape: ServingShape | None  # None: an encoder (no KV cache, no engine)
    resident: ResidentMemory  # what serving it holds resident
    draft: DraftPlan | None = None  # beside a draft model: what the draft runtime is loaded with
    split: SplitPlan | None = None  # across RPC workers: each device's layers and KV


def plan_serving(source: Source, target: str | DeviceProfile, request: ServeRequest) -> ServePlan:
    if isinstance(source, BesideDraft):
        return _beside_draft(source, target, request)
    if isinstance(source, AcrossDevices):
        return _across_workers(source, target, request)
    bundle_dir, manifest = _opened(source)
    if manifest.kind in ("embedding", "rerank"):
        return ServePlan(None, encoder_resident(bundle_dir, manifest))
    decide = bundle_serving_shape if request.refuse else planned_bundle_shape
    shape = decide(bundle_dir, manifest, request.shape, request.memory_bytes, target)
    return ServePlan(shape, _resident(manifest, shape))


def _beside_draft(source: BesideDraft, target: str | DeviceProfile, request: ServeRequest) -> ServePlan:
    bundle_dir, manifest = _opened(source.target)
    draft_dir, draft_manifest = _opened(source.draft)
    shape, draft = shape_beside_draft(bundle_dir, manifest, request.shape, draft_dir, draft_manifest,
                                      request.draft_tokens or DEFAULT_DRAFT_TOKENS, request.memory_bytes, target,
                                      refuse=request.refuse)
    return ServePlan(shape, _resident(manifest, shape), draft=draft)


def _across_workers(source: AcrossDevices, target: str | DeviceProfile, request: ServeRequest) -> ServePlan:
    bundle_dir, manifest = _opened(source.model)
    shape, split = split_serving_shape(bundle_dir, manifest, request.shape, list(source.workers or ()),
                                       request.memory_bytes, target)
    return ServePlan(shape, _resident(manifest, shape), split=split)


def _opened(source: ModelSource) -> tuple[Path, Manifest]:
    """The bundle directory and manifest of ``source``: as the caller opened (and verified) it, else read now."""
    if isinstance(source, BundleSource) and source.manifest is not None:
        return source.path, source.manifest
    opened = open_model_source(path_of(source), verify=False)
    return opened.bundle_dir, opened.manifest


def _resident(manifest: Manifest, shape: ServingShape) -> ResidentMemory:
    return resident_memory(backends.backend(manifest.format), shape)
