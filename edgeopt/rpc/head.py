"""The head's preparation for ``edgeopt serve --workers``: ask every worker, plan the split, say where
each layer goes. Nothing connects llama.cpp to a worker before every worker has answered here."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from edgeopt.store.bundle import Manifest
from edgeopt.errors import ConfigError
from edgeopt.planning import AcrossDevices, BundleSource, ServeRequest, plan_for
from edgeopt.rpc.binaries import head_protocol_version, rpc_library
from edgeopt.rpc.endpoints import Endpoint
from edgeopt.rpc.protocol import WorkerInfo, probe_workers
from edgeopt.runtimes.llama_cpp.rpc import RpcOffload
from edgeopt.sizing.shape import ServingShape, ShapeRequest
from edgeopt.sizing.split import SplitPlan, describe
from edgeopt.sizing.split_shape import WorkerMemory

log = logging.getLogger("edgeopt.rpc")


@dataclass(frozen=True)
class PreparedSplit:
    shape: ServingShape
    plan: SplitPlan
    offload: RpcOffload
    workers: tuple[WorkerInfo, ...]


def prepare_split(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, endpoints: tuple[Endpoint, ...],
                  memory_bytes: int | None, target: str) -> PreparedSplit:
    """Raises WorkerError naming a worker that is unreachable or speaks another protocol version, and
    DoesNotFitError when the model does not fit across the devices."""
    if manifest.format != "gguf":
        raise ConfigError(f"--workers splits GGUF models across llama.cpp RPC workers; this bundle is {manifest.format}",
                          "leave --workers out, or serve a GGUF bundle (edgeopt optimize --format gguf makes one)")
    workers = probe_workers(endpoints, head_protocol_version())
    memories = [WorkerMemory(str(info.endpoint), info.free_bytes) for info in workers]
    planned = plan_for(AcrossDevices(BundleSource(bundle_dir, manifest), workers=tuple(memories)), target,
                       ServeRequest(request, memory_bytes))
    shape, plan = planned.shape, planned.split
    assert shape is not None and plan is not None  # a split causal LM: both planned
    for line in describe(plan):
        log.info("split: %s", line)
    n_gpu_layers, tensor_split = plan.offload()
    offload = RpcOffload(rpc_library(), tuple(str(e) for e in endpoints), n_gpu_layers, tensor_split)
    return PreparedSplit(shape, plan, offload, workers)
