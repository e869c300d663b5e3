"""A plan that fits also serves: `edgeopt plan` and `edgeopt serve` size the KV cache with the same function
on the same memory pool, on a unified-memory board (Jetson) and on a host with a discrete GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.planning.checkpoint import make_plan
from edgeopt.server.startup.launcher import ServeOptions, serving_shape
from tests.server.gguf_bundle import make_gguf_bundle

CONTEXT = 256

JETSON = """name = "tiny-jetson"
description = "a unified-memory board: CPU and GPU share one pool"
family = "jetson"
total_memory_gb = 0.75
os_reserved_gb = 0.25
unified_memory = true
accelerator = "cuda:sm_87"
memory_bandwidth_gbps = 68.0
cores = 6
cpu_isa = "arm64"
preferred_format = "gguf"
default_quant = "F16"
default_runtime = "llama_cpp"
"""
# 64 GB of system RAM, but weights and KV are offloaded to a 0.25 GB GPU: that is the pool.
DISCRETE_GPU = """name = "tiny-gpu-host"
description = "a workstation with a small discrete GPU"
family = "host"
total_memory_gb = 64.0
os_reserved_gb = 4.0
unified_memory = false
accelerator = "cuda:sm_89"
gpu_memory_gb = 0.25
memory_bandwidth_gbps = 100.0
cores = 16
cpu_isa = "avx2"
preferred_format = "gguf"
default_quant = "F16"
default_runtime = "llama_cpp"
"""


@pytest.mark.parametrize("toml, pool_bytes", [(JETSON, int(0.5 * 1024**3)), (DISCRETE_GPU, int(0.25 * 1024**3))],
                         ids=["unified-jetson", "discrete-gpu-host"])
@pytest.mark.parametrize("concurrency", [1, 8192])
def test_a_plan_that_fits_also_serves(toml: str, pool_bytes: int, concurrency: int, tiny_gguf_factory,
                                      tiny_model_factory, tmp_path: Path) -> None:
    target = tmp_path / "profile.toml"
    target.write_text(toml)
    model_dir = tiny_model_factory("llama-gqa")
    bundle = make_gguf_bundle(tiny_gguf_factory("llama-gqa", "F16"), model_dir, tmp_path / "bundle")
    plan = make_plan(load_model_spec(str(model_dir)), _profile(target), CONTEXT, concurrency, formats=("gguf",))
    planned = next(c for c in plan.candidates if c.quant == "F16")

    options = ServeOptions(target=str(target), context=CONTEXT, max_concurrency=concurrency)
    shape = serving_shape(bundle, load_bundle(bundle), options)
    sizing = shape.sizing
    assert plan.usable_memory_bytes == sizing.usable_memory_bytes == pool_bytes
    assert planned.kv_bytes_per_token == sizing.kv_bytes_per_token
    assert planned.overhead_bytes == sizing.overhead_bytes
    # Weights: the planner's estimate against the real file (this tiny model's metadata is a large share).
    assert abs(planned.weight_bytes / sizing.weights_bytes - 1) < 0.1
    serves = sizing.kv_capacity_tokens >= CONTEXT * concurrency and sizing.context_length == CONTEXT
    assert planned.fits == serves
    assert planned.kv_layout == shape.kv_layout
    # 8192 x 256 tokens of this model (512 MiB of KV) would fit 64 GB of RAM, but neither pool.
    assert planned.fits is (concurrency == 1)


def _profile(path: Path):  # noqa: ANN202 - a DeviceProfile
    from edgeopt.profiles import load_profile

    return load_profile(str(path))
