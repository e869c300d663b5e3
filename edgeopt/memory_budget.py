"""The memory arithmetic the planner (edgeopt.plan) and the server's KV sizing (edgeopt.engine.memory,
edgeopt.server.sizing) share, so that a plan that fits also serves.

It lives apart from the planner because the planner reads the exporters' quant tables, and the serving
path must not import exporters: a device serves a bundle without the tooling that made it.
"""

from __future__ import annotations

from edgeopt.model_spec import ModelSpec

MIB = 1024**2
# Fixed cost of a runtime beside weights and KV: its code, compute buffers, allocator slack.
RUNTIME_OVERHEAD_BYTES = {"llama_cpp": 100 * MIB, "onnxruntime": 200 * MIB, "torch": 600 * MIB}
KV_BYTES_PER_ELEMENT = {"gguf": 2, "onnx": 4, "torch": 2}  # llama.cpp f16 KV; ORT fp32; torch fp16
SAFETY_MARGIN = 0.05  # of usable memory, for fragmentation and the Python process itself


def after_margin(usable_bytes: int) -> int:
    """Usable memory less the safety margin: what weights, runtime and KV may share."""
    return usable_bytes - int(usable_bytes * SAFETY_MARGIN)


def kv_facts(spec: ModelSpec, fmt: str) -> dict[str, int]:
    """What serving a causal LM of ``spec`` in ``fmt`` needs to size its KV cache: recorded in the bundle's
    manifest at export so that ``edgeopt serve`` never reads the model file for them."""
    return {"kv_bytes_per_token": spec.kv_bytes_per_token(KV_BYTES_PER_ELEMENT[fmt]),
            "context_length": spec.max_position_embeddings}
