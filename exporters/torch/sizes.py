"""Torch bundles' "quants" (the dtype of the checkpoint) and the size each gives a model (for the planner).

Pure Python on purpose, like the other formats' quant tables: the planner sizes a torch bundle without
importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeopt.sources.model_spec import ModelSpec

if TYPE_CHECKING:
    from edgeopt.profiles import DeviceProfile

TORCH_DTYPES = ("fp32", "fp16", "bf16")
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
AMPERE_SM = 80  # the first CUDA GPUs with bf16 tensor cores


def estimate_torch_bytes(spec: ModelSpec, quant: str) -> int:
    """The checkpoint in that dtype: every parameter at the dtype's size."""
    return spec.num_parameters * DTYPE_BYTES[quant]


def torch_candidates(profile: DeviceProfile) -> tuple[str, ...]:
    """Torch dtypes to offer: half precision on CUDA (bf16 from Ampere, sm_80, on), else fp32 first
    (CPU half-precision matmuls are slow or missing) with bf16 as the fallback when fp32 does not fit."""
    gpu = profile.platform.cuda_device
    if gpu is not None:
        return ("bf16",) if gpu.cuda_sm is not None and gpu.cuda_sm >= AMPERE_SM else ("fp16",)
    return ("fp32", "bf16")
