"""A device profile's record, on its own so edgeopt.profiles.host (which builds one for this machine) and the
package that loads the TOML profiles both depend on it, not on each other (no import cycle)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

GIB = 1024**3


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    family: str
    total_memory_gb: float
    os_reserved_gb: float
    unified_memory: bool
    accelerator: str  # "none" or "cuda:sm_XX"
    memory_bandwidth_gbps: float
    cores: int
    cpu_isa: str
    preferred_format: str
    default_quant: str
    default_runtime: str
    gpu_memory_gb: float = 0.0  # discrete GPU memory; 0 when none or when memory is unified
    # llama.cpp KV cache type when an f16 cache cannot hold the requested sequences (edgeopt.planning.checkpoint.choose_kv_type)
    tight_memory_kv_type: str = "q8_0"

    @property
    def has_cuda(self) -> bool:
        return self.accelerator.startswith("cuda")

    @property
    def usable_memory_bytes(self) -> int:
        """Memory a model server may use: total minus what the OS needs to stay alive."""
        return int((self.total_memory_gb - self.os_reserved_gb) * GIB)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["usable_memory_gb"] = round(self.usable_memory_bytes / GIB, 2)
        return data
