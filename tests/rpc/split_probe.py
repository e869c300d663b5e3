"""Run in a child process by test_loopback_split: load a GGUF split as `edgeopt plan --workers` plans it, and
print what each worker reports as used over the head's own connection (JSON). A child process, because
llama.cpp keeps its RPC connections for the life of the process, and a worker serves one at a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from edgeopt.sources.gguf_model import gguf_metadata, gguf_model_spec
from edgeopt.planning.devices import plan_across_devices
from edgeopt.profiles import load_profile
from edgeopt.rpc.binaries import rpc_library
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.runtimes.llama_cpp.rpc import RpcOffload, device_memory, rpc_devices
from tests.rpc.test_loopback_split import HEAD_MEMORY_MIB, SEQUENCES, CONTEXT
from edgeopt.cli.commands.plan_devices_cmd import asked_workers


def main(gguf: Path, workers: str) -> None:
    memories = asked_workers(workers)
    spec = gguf_model_spec(gguf_metadata(gguf))
    plan = plan_across_devices(spec, load_profile("host"), memories, CONTEXT, SEQUENCES,
                               memory_bytes=HEAD_MEMORY_MIB * 1024**2, gguf_file=gguf).candidates[0].split
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
