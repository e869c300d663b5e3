"""A device profile's record, on its own so edgeopt.profiles.host (which builds one for this machine) and the
package that loads the TOML profiles both depend on it, not on each other (no import cycle).

What the hardware is lives in its :class:`~edgeopt.profiles.platform.Platform`; the profile adds what edgeopt
decides about it (memory left to the OS, preferred format, quantization and runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.profiles.platform import Platform
from edgeopt.profiles.platform_fields import platform_to_fields

GIB = 1024**3
# The TOML fields in the order the profile files write them (and `edgeopt profiles --json` prints them).
FIELD_ORDER = ("name", "description", "family", "total_memory_gb", "os_reserved_gb", "unified_memory", "accelerator",
               "memory_bandwidth_gbps", "cores", "big_cores", "cpu_isa", "preferred_format", "default_quant",
               "default_runtime", "gpu_memory_gb", "tight_memory_kv_type", "accelerators")


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    family: str
    platform: Platform
    os_reserved_gb: float
    memory_bandwidth_gbps: float
    preferred_format: str
    default_quant: str
    default_runtime: str
    # llama.cpp KV cache type when an f16 cache cannot hold the requested sequences (edgeopt.sizing.kv_choice)
    tight_memory_kv_type: str = "q8_0"

    @property
    def total_memory_gb(self) -> float:
        return self.platform.memory_gb

    @property
    def cores(self) -> int:
        return self.platform.cpu.cores

    @property
    def cpu_isa(self) -> str:
        return self.platform.cpu.instruction_set.name

    @property
    def usable_memory_bytes(self) -> int:
        """Memory a model server may use: total minus what the OS needs to stay alive."""
        return int((self.total_memory_gb - self.os_reserved_gb) * GIB)

    def to_fields(self) -> dict[str, Any]:
        """The profile as TOML fields (edgeopt.profiles.profile_from_dict reads them back to an equal profile)."""
        hardware = platform_to_fields(self.platform)
        own = {"name": self.name, "description": self.description, "family": self.family,
               "os_reserved_gb": self.os_reserved_gb, "memory_bandwidth_gbps": self.memory_bandwidth_gbps,
               "preferred_format": self.preferred_format, "default_quant": self.default_quant,
               "default_runtime": self.default_runtime, "tight_memory_kv_type": self.tight_memory_kv_type}
        fields = {**own, **hardware}
        return {key: fields[key] for key in FIELD_ORDER if key in fields}

    def to_dict(self) -> dict[str, Any]:
        """The fields plus what follows from them, for ``edgeopt profiles --json``."""
        return {**self.to_fields(), "usable_memory_gb": round(self.usable_memory_bytes / GIB, 2)}
