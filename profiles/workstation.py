"""This machine as the workstation an optimize runs on: the memory a run may take now and how fast it multiplies
matrices, measured in a fraction of a second. edgeopt.planning's workshop plan is computed from these facts and
the checkpoint's shape; planning itself measures nothing (it stays arithmetic, and serve plans through it)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from edgeopt.profiles.host import cgroup_memory_limit, cpu_model_name, usable_cpu_count


@dataclass(frozen=True)
class Workstation:
    available_bytes: int  # what a run may take without pushing other processes out (MemAvailable, the cgroup's rest)
    gflops: float  # float32 matrix multiply on this process's cores, measured just now (other load included)
    cores: int
    cpu: str


def measure_workstation(seconds: float = 0.1) -> Workstation:
    return Workstation(available_memory_bytes(), matmul_gflops(seconds), usable_cpu_count(), cpu_model_name())


def available_memory_bytes() -> int:
    """MemAvailable, or less inside a container whose limit is nearer (its limit minus what it holds now)."""
    available = psutil.virtual_memory().available
    limit = cgroup_memory_limit()
    if limit is None:
        return available
    try:
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read())
    except (OSError, ValueError):
        return available
    return min(available, max(limit - used, 0))


def matmul_gflops(seconds: float = 0.1, size: int = 512) -> float:
    """Billions of float32 multiply-adds x2 a second numpy's BLAS reaches here now: the machine's arithmetic rate,
    and what its neighbours leave of it. The work an optimize does is llama.cpp's kernels, not numpy's; the
    planner's constants (edgeopt.planning.workshop) carry that ratio, measured once on a reference machine."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b  # the first product loads BLAS and its threads
    runs, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        a @ b
        runs += 1
    return 2 * size**3 * runs / elapsed / 1e9
