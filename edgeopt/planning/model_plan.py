"""``edgeopt plan``'s request on each source: a checkpoint (every candidate, and a mix made to --size), a bundle
or a GGUF file (as serve sizes it), a target beside a draft model, a model split over several boards. What the
plan refuses of the flags (a --size for a quantized model, --prefix-cache-memory for no bundle, --draft beside
no GGUF model) is refused here, before anything is sized."""

from __future__ import annotations

from dataclasses import replace

from edgeopt.byte_sizes import parse_size, read_size
from edgeopt.errors import ConfigError
from edgeopt.planning.bundle import bundle_parameters, plan_bundle
from edgeopt.planning.checkpoint import make_plan, size_candidate
from edgeopt.planning.plan import Plan
from edgeopt.planning.devices import DevicesPlan, plan_across_devices, worker_memories
from edgeopt.planning.draft import PlanBesideDraft, plan_beside_draft
from edgeopt.planning.gguf_file import plan_gguf_file
from edgeopt.planning.optimize_plan import check_mix_size, sized_quant
from edgeopt.planning.requests import PlanRequest
from edgeopt.planning.sources import (AcrossDevices, BesideDraft, BundleSource, CheckpointSource, GgufFileSource,
                                      ModelSource, path_of)
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.sources.model_spec import load_model_spec


def plan_model(source: ModelSource, profile: DeviceProfile, request: PlanRequest) -> Plan:
    check_flags(source, request)
    kv_type = parse_kv_type(request.kv_type, "gguf") if request.kv_type else None
    if request.prefix_cache_memory is not None and not isinstance(source, BundleSource):
        raise ConfigError(f"--prefix-cache-memory {request.prefix_cache_memory} plans a bundle as serve sizes it; "
                          f"{_name(source)} is not a bundle", "drop --prefix-cache-memory, or plan the bundle made from it")
    if isinstance(source, BundleSource):  # what the user holds on the device: planned as serve sizes it
        prefix = (parse_size(request.prefix_cache_memory, "--prefix-cache-memory")
                  if request.prefix_cache_memory else None)
        plan = plan_bundle(source.path, profile, request.context, request.concurrency, request.memory_bytes,
                           request.kv_type, prefix)
        return replace(plan, parameters=bundle_parameters(source.path))
    if isinstance(source, GgufFileSource):  # its own quant and shape, sized as serve will size it
        return plan_gguf_file(source.path, profile, request.context, request.concurrency or 1,
                              memory_bytes=request.memory_bytes, kv_type=kv_type)
    spec = load_model_spec(source.model)
    plan = make_plan(spec, profile, request.context, request.concurrency or 1, memory_bytes=request.memory_bytes,
                     kv_type=kv_type)
    if request.size is not None:  # what a mix of that size leaves for the KV cache
        written = read_size(request.size, "--size")
        check_mix_size(spec, written)
        plan.candidates.append(size_candidate(spec, profile, "gguf", sized_quant("gguf", None, written.bytes),
                                              plan.context, plan.concurrency, request.memory_bytes, kv_type,
                                              file_bytes=written.bytes))
    return plan


def plan_pair(source: BesideDraft, profile: DeviceProfile, request: PlanRequest) -> PlanBesideDraft:
    """``--draft``: the target planned as ``serve MODEL --draft DRAFT`` sizes it, and the draft's share."""
    check_flags(source.target, request)
    kv_type = parse_kv_type(request.kv_type, "gguf") if request.kv_type else None
    if isinstance(source.target, CheckpointSource):
        raise ConfigError(f"--draft {path_of(source.draft)} plans serve --draft, which serves a GGUF bundle or "
                          f"file; {source.target.model} is neither", "plan the GGUF bundle or file you will serve")
    return plan_beside_draft(source.target.path, path_of(source.draft), profile, request.context,
                             request.concurrency, request.memory_bytes, kv_type)


def plan_devices(source: AcrossDevices, profile: DeviceProfile, request: PlanRequest) -> DevicesPlan:
    memories = worker_memories(profile, source.devices, list(source.workers) if source.workers is not None else None,
                               request.memory_bytes)
    kv_type = parse_kv_type(request.kv_type, "gguf") if request.kv_type else None
    # A bundle is split as serve --workers loads it; planned here, it is read as the checkpoint it is not.
    model = CheckpointSource(str(source.model.path)) if isinstance(source.model, BundleSource) else source.model
    return plan_across_devices(model, profile, memories, request.context, request.concurrency or 1,
                               request.memory_bytes, kv_type)


def check_flags(source: ModelSource, request: PlanRequest) -> None:
    if request.size is not None and not isinstance(source, CheckpointSource):
        raise ConfigError(f"--size {request.size} sizes a mix made from a checkpoint; {_name(source)} is already "
                          "quantized", "drop --size, or plan the checkpoint it was made from")


def _name(source: ModelSource) -> str:
    return source.model if isinstance(source, CheckpointSource) else str(source.path)
