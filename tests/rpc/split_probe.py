"""Run in a child process by test_loopback_split: load a GGUF split as `edgeopt plan --workers` plans it, and
print what each worker reports as used over the head's own connection (JSON). A child process, because
llama.cpp keeps its RPC connections for the life of the process, and a worker serves one at a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from edgeopt.planning import AcrossDevices, GgufFileSource, PlanRequest, plan_for
from edgeopt.profiles import load_profile
from edgeopt.rpc.binaries import rpc_library
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.runtimes.llama_cpp.rpc import RpcOffload, device_memory, rpc_devices
from tests.rpc.test_loopback_split import HEAD_MEMORY_MIB, SEQUENCES, CONTEXT
from edgeopt.cli.commands.plan_devices_cmd import asked_workers


def main(gguf: Path, workers: str) -> None:
    memories = asked_workers(workers)
    plan = plan_for(AcrossDevices(GgufFileSource(gguf), workers=tuple(memories)), load_profile("host"),
                    PlanRequest(context=CONTEXT, concurrency=SEQUENCES,
                                memory_bytes=HEAD_MEMORY_MIB * 1024**2)).candidates[0].split
    n_gpu_layers, tensor_split = plan.offload()
    offload = RpcOffload(rpc_library(), tuple(w.name for w in memories), n_gpu_layers, tensor_split)
    runtime = load_gguf(gguf, kv_capacity_tokens=CONTEXT * SEQUENCES, max_slots=SEQUENCES, threads=1,
                        context_length=CONTEXT, cache_slots=0, offload=offload)
    used = []
    for device in rpc_devices(offload.library, offload.endpoints):
        free, total = device_memory(device)
        used.append(total - free)
    runtime.close()
    print(json.dumps({"used": used, "planned": [share.total_bytes for share in plan.shares[1:]]}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
