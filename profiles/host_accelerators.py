"""This machine's accelerators, found without importing torch (the serving path must stay light).

A Jetson first: its GPU is integrated and shares the CPU's memory, and JetPack 5 ships no nvidia-smi, so the
board is recognised by L4T's release file or the device tree, and its GPU's compute capability read from the
SoC the device tree names. Else a discrete NVIDIA GPU: nvidia-smi when installed (and when it answers nothing,
no usable GPU: a driver it cannot talk to would fail llama.cpp's offload too); without nvidia-smi, the
driver's own /proc/driver/nvidia/gpus, then /dev/nvidia0... (a container given the device but not the tool).

NPUs are not looked for: no runtime drives one, and a host that reported its NPU would be refused by each
(edgeopt.profiles.platform.Platform.refuse_unsupported); a profile file names one instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from edgeopt.profiles.platform import Accelerator, AcceleratorKind

# The Tegra SoC a Jetson's device tree names -> its GPU's compute capability (NVIDIA's CUDA GPU table).
TEGRA_CUDA_SM = {"tegra234": 87, "tegra194": 72, "tegra186": 62, "tegra210": 53}


@dataclass(frozen=True)
class HostFiles:
    """Where the host's hardware is described (tests point these at a temporary directory)."""

    tegra_release: Path = Path("/etc/nv_tegra_release")
    device_tree: Path = Path("/proc/device-tree")
    driver_gpus: Path = Path("/proc/driver/nvidia/gpus")
    dev: Path = Path("/dev")


@dataclass(frozen=True)
class HostAccelerators:
    accelerators: tuple[Accelerator, ...]
    memory_shared: bool  # an integrated GPU (Jetson) on the CPU's memory


@lru_cache(maxsize=1)
def host_accelerators() -> HostAccelerators:
    """This machine's accelerators, found once per process (they do not come and go while it runs)."""
    return find_accelerators(HostFiles(), shutil.which("nvidia-smi") is not None)


def find_accelerators(files: HostFiles, has_nvidia_smi: bool) -> HostAccelerators:
    jetson = jetson_gpu(files)
    if jetson is not None:
        return HostAccelerators((jetson,), memory_shared=True)
    if has_nvidia_smi:
        return HostAccelerators(nvidia_smi_gpus(), memory_shared=False)
    return HostAccelerators(driver_gpus(files), memory_shared=False)


def jetson_gpu(files: HostFiles) -> Accelerator | None:
    model = _read(files.device_tree / "model").strip("\0 \n")
    if not files.tegra_release.is_file() and "jetson" not in model.lower():
        return None
    compatible = _read(files.device_tree / "compatible").split("\0")
    sm = next((TEGRA_CUDA_SM[soc.partition(",")[2]] for soc in compatible if soc.partition(",")[2] in TEGRA_CUDA_SM),
              None)
    return Accelerator(AcceleratorKind.CUDA_GPU, model or "NVIDIA Jetson", cuda_sm=sm)


def nvidia_smi_gpus() -> tuple[Accelerator, ...]:
    """Each GPU nvidia-smi lists, with its compute capability; none when it fails (no usable GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = []
    for line in out.strip().splitlines():
        capability, _, name = (part.strip() for part in line.partition(","))
        sm = capability.replace(".", "")
        gpus.append(Accelerator(AcceleratorKind.CUDA_GPU, name, cuda_sm=int(sm) if sm.isdigit() else None))
    return tuple(gpus)


def driver_gpus(files: HostFiles) -> tuple[Accelerator, ...]:
    """GPUs the NVIDIA driver lists (no compute capability there), else its device nodes /dev/nvidiaN."""
    named = [_model_line(info) for info in sorted(files.driver_gpus.glob("*/information"))]
    if named:
        return tuple(Accelerator(AcceleratorKind.CUDA_GPU, name) for name in named)
    nodes = [p for p in files.dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    return tuple(Accelerator(AcceleratorKind.CUDA_GPU) for _ in nodes)


def _model_line(information: Path) -> str:
    for line in _read(information).splitlines():
        if line.startswith("Model:"):
            return line.partition(":")[2].strip()
    return ""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
