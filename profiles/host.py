"""Describe this machine as a device profile: memory (psutil *and* the cgroup limit), cores, CUDA."""

from __future__ import annotations

import os
import platform
import shutil
import time
from pathlib import Path

import psutil

from edgeopt import backends
from edgeopt.profiles.device import GIB, DeviceProfile

HOST_FORMAT = "gguf"  # llama.cpp runs on any CPU and offloads to any GPU it was built for

# cgroup v2 then v1: inside a container the limit, not the host's RAM, is what the OOM killer enforces.
_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def cgroup_memory_limit() -> int | None:
    """The container's memory limit in bytes, or None when unlimited / not in a cgroup."""
    for name in _CGROUP_LIMIT_FILES:
        try:
            raw = Path(name).read_text().strip()
        except OSError:
            continue
        if raw == "max":
            return None
        try:
            value = int(raw)
        except ValueError:
            continue
        # cgroup v1 reports "unlimited" as a huge page-aligned number.
        if value < (1 << 60):
            return value
    return None


def host_memory_bytes() -> int:
    total = psutil.virtual_memory().total
    limit = cgroup_memory_limit()
    return min(total, limit) if limit else total


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask: a cpuset or taskset narrows it); [] if unknown."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def usable_cpu_count() -> int:
    """How many CPUs this process may run on (os.cpu_count() where the affinity mask is unknown)."""
    return len(usable_cpus()) or (os.cpu_count() or 1)


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo ("flags" on x86, "Features" on ARM); empty elsewhere."""
    return {flag for line in _cpuinfo_lines() if line.startswith(("flags", "Features")) for flag in line.split()}


def cpu_model_name() -> str:
    """The CPU's model from /proc/cpuinfo ("model name" on x86, "Model" or "CPU part" on ARM), else the platform's."""
    for line in _cpuinfo_lines():
        if line.startswith(("model name", "Model", "CPU part")):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _cpu_isa() -> str:
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    flags = cpu_flags()
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx2" in flags:
        return "avx2"
    return "x86_64"


def cuda_accelerator() -> str:
    """Detect an NVIDIA GPU without importing torch (the serving path must stay light)."""
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip().splitlines()
    except Exception:  # nvidia-smi present but no usable GPU
        return "none"
    if not out:
        return "none"
    return "cuda:sm_" + out[0].strip().replace(".", "")


def detect_host_profile() -> DeviceProfile:
    total = host_memory_bytes()
    # Leave the OS 10% (at least 0.5 GiB, at most 4 GiB): enough for a shell and page cache.
    reserved = min(max(0.1 * total, 0.5 * GIB), 4 * GIB)
    return DeviceProfile(
        name="host",
        description=f"this machine ({platform.node() or 'unknown'}, {platform.machine()})",
        family="host",
        total_memory_gb=round(total / GIB, 3),
        os_reserved_gb=round(reserved / GIB, 3),
        unified_memory=False,
        accelerator=cuda_accelerator(),
        memory_bandwidth_gbps=0.0,  # unknown; not needed for sizing
        cores=usable_cpu_count(),
        cpu_isa=_cpu_isa(),
        preferred_format=HOST_FORMAT,
        default_quant="Q8_0",
        default_runtime=backends.backend(HOST_FORMAT).runtime,
    )


class OtherCpuLoad:
    """How many of this process's CPUs *other* processes kept busy, averaged since the previous reading.

    Busy time of the CPUs we may run on (/proc/stat, user through steal: on a VM stolen time is a
    neighbour's) minus our own CPU time (os.times, all our threads): what is left is work we compete
    with. Linux only; elsewhere every reading is None.
    """

    def __init__(self) -> None:
        self._cpus = usable_cpus()
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._sample()

    def read(self) -> float | None:
        """Cores others kept busy since the last call (or construction); None when unknown or no time passed."""
        now, last = self._sample(), self._last
        self._last = now
        if now is None or last is None or now[0] <= last[0]:
            return None
        others = (now[1] - last[1]) - (now[2] - last[2])
        return max(0.0, others / (now[0] - last[0]))

    def _sample(self) -> tuple[float, float, float] | None:
        """(monotonic s, busy CPU-s of our CPUs, our own CPU-s)."""
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return None
        wanted = {f"cpu{n}" for n in self._cpus}
        busy = 0
        for line in lines:
            fields = line.split()
            if fields and fields[0] in wanted:
                # user nice system idle iowait irq softirq steal: everything but idle and iowait
                values = [int(v) for v in fields[1:9]]
                busy += sum(values) - values[3] - values[4]
        own = os.times()
        return time.monotonic(), busy / self._tick, own.user + own.system
