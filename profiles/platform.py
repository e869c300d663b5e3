"""A device as a typed platform: what a target has (memory, CPU cores and instruction set, accelerators by
kind, whether they share the CPU's memory), and the questions sizing and the runtimes ask of it instead of
matching accelerator strings. This module is the only place that reads those names (``"cuda:sm_87"`` in a
profile, ``device="cuda"`` passed to the torch runtime); tests/profiles/test_platform_strings.py keeps it so.

Accelerators edgeopt drives are CUDA GPUs (llama.cpp offloads layers, ONNX Runtime has CUDA and TensorRT
providers, torch runs on them). An NPU can be described (a Rockchip RK3588's RKNPU2, say) so that a profile
says what the board has; no runtime drives one, and each refuses to pick a device on such a platform rather
than silently leave the NPU idle (:meth:`Platform.refuse_unsupported`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from edgeopt.errors import ConfigError
from edgeopt.profiles.instruction_sets import InstructionSet, instruction_set

NO_ACCELERATOR = "none"  # what a profile's ``accelerator`` says of a CPU-only board
_LEGACY_CUDA = re.compile(r"cuda(?::sm_(\d+))?")  # the ``accelerator`` key: "cuda" or "cuda:sm_87"


class AcceleratorKind(Enum):
    """Kinds of accelerator; the value is what a profile's ``[[accelerators]] kind`` says."""

    CUDA_GPU = "cuda"
    NPU = "npu"

    @property
    def description(self) -> str:
        return {AcceleratorKind.CUDA_GPU: "CUDA GPU", AcceleratorKind.NPU: "NPU"}[self]


def accelerator_kind(text: str) -> AcceleratorKind:
    """The kind a profile names; a ConfigError listing the kinds otherwise."""
    for kind in AcceleratorKind:
        if kind.value == text.strip().lower():
            return kind
    raise ConfigError(f"unknown accelerator kind {text!r}", f"one of {', '.join(k.value for k in AcceleratorKind)}")


@dataclass(frozen=True)
class Accelerator:
    kind: AcceleratorKind
    name: str = ""  # free text naming the part ("rockchip-rknpu2", "NVIDIA GeForce RTX 4090"); "" when unknown
    cuda_sm: int | None = None  # a CUDA GPU's compute capability as sm_XX (87: Orin); None when unknown
    memory_bytes: int = 0  # its own memory; 0 when it shares the CPU's (Jetson, most NPUs) or is unknown

    @property
    def label(self) -> str:
        """One word for tables: ``cuda:sm_87``, ``cuda``, ``npu:rockchip-rknpu2``."""
        if self.kind is AcceleratorKind.CUDA_GPU:
            return self.kind.value + (f":sm_{self.cuda_sm}" if self.cuda_sm is not None else "")
        return self.kind.value + (f":{self.name}" if self.name else "")


def legacy_accelerators(text: str, memory_bytes: int = 0) -> tuple[Accelerator, ...]:
    """A profile's ``accelerator`` key (``"none"``, ``"cuda"`` or ``"cuda:sm_XX"``) as accelerators."""
    if text == NO_ACCELERATOR:
        return ()
    match = _LEGACY_CUDA.fullmatch(text)
    if match is None:
        raise ConfigError(f"accelerator={text!r} is invalid",
                          "'none' or 'cuda:sm_XX'; name any other accelerator in an [[accelerators]] table")
    return (Accelerator(AcceleratorKind.CUDA_GPU, cuda_sm=int(match[1]) if match[1] else None,
                        memory_bytes=memory_bytes),)


@dataclass(frozen=True)
class CpuCores:
    """The CPU: its cores, how many of them are big (all of them on a CPU whose cores are alike; the
    Cortex-A76s of an RK3588's four A76 + four A55), and the instruction-set level its kernels may use."""

    cores: int
    big_cores: int
    instruction_set: InstructionSet

    @property
    def little_cores(self) -> int:
        return self.cores - self.big_cores

    @property
    def compute_threads(self) -> int:
        """Threads for a forward pass: the big cores. A step split evenly across big and little cores waits
        for the little ones, so they only slow it down (llama.cpp's advice on big.LITTLE boards too)."""
        return self.big_cores


@dataclass(frozen=True)
class Platform:
    memory_gb: float  # system memory, GB as the profile states it (the budget's arithmetic is the profile's)
    cpu: CpuCores
    accelerators: tuple[Accelerator, ...] = ()
    # The accelerators use the CPU's memory (Jetson's one LPDDR5, an NPU's DMA buffers): count it once.
    memory_shared_with_accelerator: bool = False

    @staticmethod
    def cpu_only(memory_gb: float, cores: int, cpu_isa: str) -> Platform:
        """A board with a CPU whose cores are alike, and no accelerator."""
        return Platform(memory_gb, CpuCores(cores, cores, instruction_set(cpu_isa)))

    @property
    def cuda_device(self) -> Accelerator | None:
        """The CUDA GPU models are offloaded to (the first named), or None."""
        return next((a for a in self.accelerators if a.kind is AcceleratorKind.CUDA_GPU), None)

    @property
    def has_cuda(self) -> bool:
        return self.cuda_device is not None

    @property
    def offload_memory_bytes(self) -> int:
        """The memory weights and KV live in when not the CPU's: a CUDA GPU's own; 0 when they live in the
        CPU's memory (no CUDA GPU, one that shares it, or one whose memory is unknown)."""
        gpu = self.cuda_device
        if gpu is None or self.memory_shared_with_accelerator:
            return 0
        return gpu.memory_bytes

    @property
    def accelerator_label(self) -> str:
        """The accelerators for a table: ``none``, ``cuda:sm_87``, ``npu:rockchip-rknpu2``, comma-separated."""
        return ", ".join(a.label for a in self.accelerators) or NO_ACCELERATOR

    def unsupported(self, drives: frozenset[AcceleratorKind]) -> tuple[Accelerator, ...]:
        """The accelerators a runtime that drives ``drives`` cannot use."""
        return tuple(a for a in self.accelerators if a.kind not in drives)

    def refuse_unsupported(self, runtime: str, device: str, drives: frozenset[AcceleratorKind],
                           cpu_option: str) -> None:
        """Raise a ConfigError when ``device`` (a profile's name) has an accelerator ``runtime`` cannot drive.

        A runtime asks before it picks a device on its own: placing the model on the CPU of a board whose
        NPU was the point would pass unnoticed. ``cpu_option`` is how the caller asks that runtime for the
        CPU explicitly, which skips this question."""
        refused = self.unsupported(drives)
        if not refused:
            return
        first = refused[0]
        named = f"{first.kind.description} ({first.name or first.label})"
        usable = ", ".join(k.description for k in AcceleratorKind if k in drives)
        raise ConfigError(
            f"device {device!r} has an {named}, which the {runtime} runtime cannot use: edgeopt runs models on "
            f"the CPU{' or a ' + usable if usable else ''} only",
            f"run on the CPU: pass {cpu_option}, or give the runtime a profile that names no "
            f"{first.kind.description} (this one without its [[accelerators]] entry)")

    def placement(self, requested: str) -> Accelerator | None:
        """The accelerator a runtime option such as torch's ``device`` names (``auto``, ``cpu``, ``cuda``) on
        this platform; None: the CPU. ``auto`` is the CUDA GPU when there is one."""
        wanted = requested.strip().lower()
        if wanted == "cpu":
            return None
        if wanted == "auto":
            return self.cuda_device
        if wanted == AcceleratorKind.CUDA_GPU.value:
            if self.cuda_device is None:
                raise ConfigError("device 'cuda' was requested but this device has no CUDA GPU",
                                  "serve with device=cpu, or on a machine with an NVIDIA GPU")
            return self.cuda_device
        raise ConfigError(f"device {requested!r} is not supported", "use auto, cpu or cuda")


def torch_device_name(placement: Accelerator | None) -> str:
    """torch's name for a placement (``cpu``, ``cuda``): what ``model.to`` and tensors take."""
    if placement is None:
        return "cpu"
    if placement.kind is AcceleratorKind.CUDA_GPU:
        return "cuda"
    raise ConfigError(f"torch cannot run on an {placement.kind.description} ({placement.label})",
                      "run the torch bundle on the CPU (device=cpu) or a CUDA GPU")


def nvidia_smi_lists_a_gpu(listing: str) -> bool:
    """Whether ``nvidia-smi -L``'s output names a GPU ("GPU 0: NVIDIA H200 (UUID: ...)"); a machine with the driver
    but no device prints "No devices were found" instead."""
    return any(line.startswith("GPU ") for line in listing.splitlines())
