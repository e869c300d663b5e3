"""Describe this machine as a device profile: memory (psutil *and* the cgroup limit), cores (big ones apart),
instruction set, CUDA GPU (profiles/host_accelerators.py)."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import psutil

from edgeopt import backends
from edgeopt.profiles.device import GIB, DeviceProfile
from edgeopt.profiles.host_accelerators import host_accelerators
from edgeopt.profiles.instruction_sets import detect_instruction_set
from edgeopt.profiles.platform import CpuCores, Platform

HOST_FORMAT = "gguf"  # llama.cpp runs on any CPU and offloads to any GPU it was built for

# A core below this share of the fastest core's capacity is a little one: an RK3588's Cortex-A55s (about 40% of
# its A76s), Alder Lake's E-cores (about 75% of its P-cores' clock); turbo-favoured cores of one design differ by
# a few percent and stay alike.
BIG_CORE_SHARE = 0.8
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


def big_cpu_count(cpus: list[int], sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int:
    """How many of ``cpus`` are big cores: those within BIG_CORE_SHARE of the fastest's capacity (the
    scheduler's cpu_capacity, else cpufreq's cpuinfo_max_freq). All of them when either is unreadable for any
    (a VM, most x86 machines): cores are then alike as far as anyone can tell."""
    speeds = [_cpu_speed(sys_cpu / f"cpu{n}") for n in cpus]
    known = [s for s in speeds if s is not None]
    if not known or len(known) != len(speeds):
        return len(cpus)
    return sum(1 for s in known if s >= BIG_CORE_SHARE * max(known))


def _cpu_speed(cpu_dir: Path) -> int | None:
    for name in ("cpu_capacity", "cpufreq/cpuinfo_max_freq"):
        try:
            return int((cpu_dir / name).read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def host_platform(memory_bytes: int | None = None) -> Platform:
    """This machine as a platform: memory, the CPUs this process may use (big ones counted apart), its
    instruction set from /proc/cpuinfo, and its CUDA GPU (profiles/host_accelerators.py)."""
    cpus = usable_cpus()
    cores = len(cpus) or (os.cpu_count() or 1)
    big = big_cpu_count(cpus) if cpus else cores
    found = host_accelerators()
    memory = host_memory_bytes() if memory_bytes is None else memory_bytes
    return Platform(memory_gb=round(memory / GIB, 3),
                    cpu=CpuCores(cores, big, detect_instruction_set(platform.machine(), cpu_flags())),
                    accelerators=found.accelerators, memory_shared_with_accelerator=found.memory_shared)


def detect_host_profile() -> DeviceProfile:
    total = host_memory_bytes()
    # Leave the OS 10% (at least 0.5 GiB, at most 4 GiB): enough for a shell and page cache.
    reserved = min(max(0.1 * total, 0.5 * GIB), 4 * GIB)
    return DeviceProfile(
        name="host",
        description=f"this machine ({platform.node() or 'unknown'}, {platform.machine()})",
        family="host",
        platform=host_platform(total),
        os_reserved_gb=round(reserved / GIB, 3),
        memory_bandwidth_gbps=0.0,  # unknown; not needed for sizing
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
