"""Size the KV cache to the memory the server may use (the number `edgeopt serve` passes to the runtime).

    budget   = usable memory x (1 - safety margin) - weights - runtime overhead
    capacity = budget // KV bytes per token, capped at max_sequences x context (no use holding more)

Usable memory comes, in order of precedence, from an explicit ``--memory`` override, a device profile
(serving for a target), or this host (psutil total, lowered to the cgroup limit inside a container,
minus an OS reserve). Jetson memory is unified: weights and KV draw from the same pool, counted once.
On a discrete CUDA GPU with weights offloaded, the KV lives in GPU memory, so that is the pool.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from edgeopt.errors import ConfigError, DoesNotFitError
from edgeopt.memory_budget import MIB, RUNTIME_OVERHEAD_BYTES, after_margin
from profiles import GIB, DeviceProfile, load_profile

DEFAULT_MAX_SEQUENCES = 16  # concurrent streams the issue targets; preemption covers bursts beyond KV
MIN_TOKENS_PER_SEQUENCE = 256  # do not admit more sequences than can each hold this much KV


@dataclass(frozen=True)
class KvSizing:
    memory_source: str  # "--memory", "profile <name>" or "host"
    usable_memory_bytes: int
    weights_bytes: int
    overhead_bytes: int
    margin_bytes: int
    kv_bytes_per_token: int
    kv_budget_bytes: int
    kv_capacity_tokens: int
    max_sequences: int
    context_length: int  # the request limit: the requested context, lowered to the capacity

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def usable_memory(profile: DeviceProfile | None = None, memory_bytes: int | None = None) -> tuple[int, str]:
    """Memory the server may use, and where that number came from."""
    if memory_bytes is not None:
        if memory_bytes <= 0:
            raise ConfigError(f"--memory={memory_bytes} bytes is invalid", "pass a positive size such as 4GiB")
        return memory_bytes, "--memory"
    if profile is None:
        return load_profile("host").usable_memory_bytes, "host"
    if profile.has_cuda and not profile.unified_memory and profile.gpu_memory_gb > 0:
        return int(profile.gpu_memory_gb * GIB), f"profile {profile.name} (GPU memory)"
    return profile.usable_memory_bytes, f"profile {profile.name}"


def kv_capacity_for(weights_bytes: int, kv_bytes_per_token: int, *, runtime: str = "llama_cpp",
                    overhead_bytes: int | None = None, profile: DeviceProfile | None = None,
                    memory_bytes: int | None = None, context_length: int = 4096,
                    max_sequences: int | None = None) -> KvSizing:
    """How many KV tokens (and concurrent sequences) fit beside the weights; raises if not even one."""
    if kv_bytes_per_token <= 0 or weights_bytes < 0 or context_length < 2:
        raise ConfigError(f"kv_bytes_per_token={kv_bytes_per_token}, weights_bytes={weights_bytes}, "
                          f"context_length={context_length} are invalid", "these come from the bundle's model")
    if max_sequences is not None and max_sequences < 1:
        raise ConfigError(f"max_sequences={max_sequences} is invalid", "pass --max-sequences >= 1")
    if overhead_bytes is None:
        if runtime not in RUNTIME_OVERHEAD_BYTES:
            raise ConfigError(f"unknown runtime {runtime!r}", f"valid: {', '.join(RUNTIME_OVERHEAD_BYTES)}")
        overhead_bytes = RUNTIME_OVERHEAD_BYTES[runtime]
    usable, source = usable_memory(profile, memory_bytes)
    margin = usable - after_margin(usable)
    budget = after_margin(usable) - weights_bytes - overhead_bytes
    fits_tokens = max(budget, 0) // kv_bytes_per_token
    if fits_tokens < 2:
        raise DoesNotFitError(
            f"no memory left for the KV cache: {usable / MIB:.0f} MiB usable ({source}) - "
            f"{weights_bytes / MIB:.0f} MiB weights - {overhead_bytes / MIB:.0f} MiB runtime - "
            f"{margin / MIB:.0f} MiB margin = {budget / MIB:.0f} MiB",
            "use a smaller quantization (edgeopt optimize --quant Q4_0), or a larger --memory if this is wrong")
    context = min(context_length, fits_tokens)
    wanted = max_sequences or DEFAULT_MAX_SEQUENCES
    # Each admitted sequence should be able to hold a reasonable share of the cache.
    affordable = max(1, fits_tokens // min(context, MIN_TOKENS_PER_SEQUENCE))
    sequences = wanted if max_sequences is not None else min(wanted, affordable)
    capacity = min(fits_tokens, sequences * context)
    return KvSizing(source, usable, weights_bytes, overhead_bytes, margin, kv_bytes_per_token, budget,
                    capacity, sequences, context)
