"""The serving shape of a bundle split across the head and RPC workers (``edgeopt serve --workers``).

The cells are sized as for one device (edgeopt.sizing.shape.decide_serving_shape) on every device's memory
together, then lowered to the most cells whose split (edgeopt.sizing.split) fits each device on its own:
each layer's KV sits with the layer, so the cells are what the tightest device can hold for its layers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from edgeopt import backends
from edgeopt.backends import Backend
from edgeopt.store.bundle import Manifest
from edgeopt.errors import DoesNotFitError
from edgeopt.sources.gguf_metadata import read_tensor_bytes
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.profiles import DeviceProfile, load_profile
from edgeopt.sizing.budget import DEFAULT_MAX_SEQUENCES, MemoryPool, memory_pool
from edgeopt.sizing.bundle_facts import bundle_kv_facts, bundle_model_spec, recorded_kv_type
from edgeopt.sizing.layout import AUTO, UNIFIED
from edgeopt.sizing.shape import (ServingShape, ShapeRequest, check_shape_request, decide_serving_shape,
                                  refuse_context_past_window)
from edgeopt.sizing.split import Device, LayerWeights, SplitPlan, describe, largest_fitting_cells, plan_split

# A worker's compute buffers, in float32 activations per batch token, fitted to llama.cpp's CPU device behind
# RPC (SmolLM2-135M, batch 128: ~2.9 MiB measured beside weights and KV; this gives 2.6 MiB, and the plan's
# per-worker total came within 1.1% of what the workers reported: tests/rpc/test_loopback_split.py).
ACTIVATIONS_PER_HIDDEN_UNIT = 6


def split_kv_layout(asked: str) -> str:
    """``--kv-layout auto`` is ``unified`` for a split model. The streams layout shares a cached prefix by
    copying whole streams (runtimes/llama_cpp/kv_layouts.py), and behind RPC llama.cpp copies each layer's K and
    V with a round trip to the worker (COPY_TENSOR, synchronous): on two loopback workers the first step of a
    request that hit the prefix cache took 317 ms against 148 for a decode step (one process: 220 vs 193),
    and over whole loads unified was 1.5-3.2x faster to the first token and decoded 1.6-7x faster
    (docs/more-than-one-board.md). In the unified layout sharing is a tag on cells: nothing crosses the
    network. An explicit layout is kept."""
    return UNIFIED if asked == AUTO else asked


def worker_compute_bytes(entry: Backend, spec: ModelSpec) -> int:
    batch = entry.serving.batch_tokens or 128
    return batch * 4 * (ACTIVATIONS_PER_HIDDEN_UNIT * spec.hidden_size + spec.intermediate_size)


@dataclass(frozen=True)
class WorkerMemory:
    name: str  # host:port
    memory_bytes: int  # what the worker advertises (edgeopt worker --memory)


def split_devices(entry: Backend, spec: ModelSpec, head: MemoryPool, head_runtime_bytes: int,
                  workers: list[WorkerMemory]) -> list[Device]:
    compute = worker_compute_bytes(entry, spec)
    return [Device("head", head.bytes, head_runtime_bytes)] + [Device(w.name, w.memory_bytes, compute) for w in workers]


def split_serving_shape(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, workers: list[WorkerMemory],
                        memory_bytes: int | None = None,
                        target: str | DeviceProfile = "host") -> tuple[ServingShape, SplitPlan]:
    """The shape and the split ``edgeopt serve --workers`` loads; DoesNotFitError, per device, when even two
    KV cells do not fit."""
    entry = backends.backend(manifest.format)
    check_shape_request(entry, request)
    request = replace(request, kv_layout=split_kv_layout(request.kv_layout))
    facts = bundle_kv_facts(bundle_dir, manifest)
    refuse_context_past_window(request, facts.context_length)
    spec = bundle_model_spec(bundle_dir, manifest)
    profile = None if memory_bytes is not None else target if isinstance(target, DeviceProfile) else load_profile(target)
    head = memory_pool(profile, memory_bytes)
    devices = split_devices(entry, spec, head, facts.overhead_bytes(request.max_sequences or DEFAULT_MAX_SEQUENCES),
                            workers)
    weights = LayerWeights.from_tensor_bytes(read_tensor_bytes(Path(bundle_dir) / manifest.model_file))
    together = MemoryPool(sum(d.memory_bytes for d in devices) - sum(d.compute_bytes for d in devices[1:]),
                          f"head ({head.source}) and {len(workers)} workers")
    shape = decide_serving_shape(entry, manifest.quant, facts, together, request, recorded_kv_type(manifest))
    per_token = shape.sizing.kv_bytes_per_token
    cells = largest_fitting_cells(weights, per_token, shape.kv_cells, devices)
    if cells < 2:
        lines = "; ".join(describe(plan_split(weights, per_token, 2, devices)))
        raise DoesNotFitError(f"{manifest.model_file} does not fit across the head and {len(workers)} workers: {lines}",
                              "add a worker, give the workers more --memory, or use a smaller quantization")
    if cells < shape.kv_cells:
        shape = replace(shape, kv_cells=cells)
    return shape, plan_split(weights, per_token, shape.kv_cells, devices)

