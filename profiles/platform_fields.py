"""A profile file's hardware fields, read into a :class:`~edgeopt.profiles.platform.Platform` and written back.

The keys every profile has had stay as they were (``total_memory_gb``, ``unified_memory``, ``accelerator =
"cuda:sm_87"``, ``gpu_memory_gb``, ``cores``, ``cpu_isa``); two are optional and new: ``big_cores`` (the fast
cores of a big.LITTLE CPU; default: all of them) and an ``[[accelerators]]`` table for what the
``accelerator`` string cannot say::

    [[accelerators]]
    kind = "npu"                 # "cuda" or "npu"
    name = "rockchip-rknpu2"     # free text
    # cuda_sm = 89               # a CUDA GPU's compute capability
    # memory_gb = 24.0           # its own memory; leave out when it shares the CPU's
"""

from __future__ import annotations

from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.profiles.instruction_sets import CPU_ISAS, instruction_set
from edgeopt.profiles.platform import (NO_ACCELERATOR, Accelerator, AcceleratorKind, CpuCores, Platform,
                                       accelerator_kind, legacy_accelerators)

GIB = 1024**3
REQUIRED_KEYS = ("total_memory_gb", "unified_memory", "cores", "cpu_isa")
OPTIONAL_KEYS = ("accelerator", "gpu_memory_gb", "big_cores", "accelerators")
ACCELERATOR_KEYS = ("kind", "name", "cuda_sm", "memory_gb")


def platform_from_fields(data: dict[str, Any], source: str) -> Platform:
    """The platform a profile file's hardware fields describe; every problem names the file and the field."""
    cores = data["cores"]
    big_cores = data.get("big_cores", cores)
    _check(isinstance(cores, int) and cores >= 1, source, "cores", cores, "must be >= 1")
    _check(isinstance(big_cores, int) and 1 <= big_cores <= cores, source, "big_cores", big_cores,
           "must be between 1 and cores (leave it out when the cores are alike)")
    _check(data["cpu_isa"] in CPU_ISAS, source, "cpu_isa", data["cpu_isa"], f"one of {CPU_ISAS}")
    gpu_memory = int(float(data.get("gpu_memory_gb", 0.0)) * GIB)
    try:
        named = legacy_accelerators(data.get("accelerator", NO_ACCELERATOR), gpu_memory)
    except ConfigError as exc:
        raise ConfigError(f"profile {source}: {exc.message}", exc.hint) from exc
    tables = data.get("accelerators", [])
    _check(isinstance(tables, list), source, "accelerators", tables, "an array of [[accelerators]] tables")
    extra = tuple(_accelerator(entry, source) for entry in tables)
    return Platform(memory_gb=data["total_memory_gb"],
                    cpu=CpuCores(cores, big_cores, instruction_set(data["cpu_isa"])),
                    accelerators=named + extra, memory_shared_with_accelerator=bool(data["unified_memory"]))


def _accelerator(entry: Any, source: str) -> Accelerator:
    _check(isinstance(entry, dict), source, "accelerators", entry, "each entry a table with a kind")
    unknown = set(entry) - set(ACCELERATOR_KEYS)
    _check(not unknown, source, "accelerators", sorted(unknown), f"an entry's keys are {list(ACCELERATOR_KEYS)}")
    _check("kind" in entry, source, "accelerators", entry, "each entry needs a kind")
    try:
        kind = accelerator_kind(str(entry["kind"]))
    except ConfigError as exc:
        raise ConfigError(f"profile {source}: accelerators kind={entry['kind']!r} is invalid", exc.hint) from exc
    cuda_sm = entry.get("cuda_sm")
    _check(cuda_sm is None or (kind is AcceleratorKind.CUDA_GPU and isinstance(cuda_sm, int) and cuda_sm > 0),
           source, "accelerators cuda_sm", cuda_sm, "a CUDA GPU's compute capability such as 89, on kind = \"cuda\"")
    memory_gb = entry.get("memory_gb", 0.0)
    _check(isinstance(memory_gb, (int, float)) and memory_gb >= 0, source, "accelerators memory_gb", memory_gb,
           "must be >= 0")
    return Accelerator(kind, str(entry.get("name", "")), cuda_sm, int(memory_gb * GIB))


def platform_to_fields(platform: Platform) -> dict[str, Any]:
    """The hardware fields :func:`platform_from_fields` reads back to an equal platform; the first CUDA GPU in the
    ``accelerator`` string as the profiles have always said it, any other accelerator in ``accelerators``."""
    gpu = platform.cuda_device
    others = [a for a in platform.accelerators if a is not gpu]
    fields: dict[str, Any] = {
        "total_memory_gb": platform.memory_gb, "unified_memory": platform.memory_shared_with_accelerator,
        "accelerator": gpu.label if gpu is not None else NO_ACCELERATOR, "cores": platform.cpu.cores,
        "cpu_isa": platform.cpu.instruction_set.name,
        "gpu_memory_gb": gpu.memory_bytes / GIB if gpu is not None else 0.0,
    }
    if platform.cpu.little_cores:
        fields["big_cores"] = platform.cpu.big_cores
    if others:
        fields["accelerators"] = [_accelerator_fields(a) for a in others]
    return fields


def _accelerator_fields(accelerator: Accelerator) -> dict[str, Any]:
    fields: dict[str, Any] = {"kind": accelerator.kind.value, "name": accelerator.name}
    if accelerator.cuda_sm is not None:
        fields["cuda_sm"] = accelerator.cuda_sm
    if accelerator.memory_bytes:
        fields["memory_gb"] = accelerator.memory_bytes / GIB
    return fields


def _check(ok: bool, source: str, field: str, value: Any, rule: str) -> None:
    if not ok:
        raise ConfigError(f"profile {source}: {field}={value!r} is invalid", rule)
