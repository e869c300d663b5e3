"""The one table of CPU instruction-set levels: what a profile's ``cpu_isa`` may name, how this machine's is
found (profiles/host.py), and what the quantizers need to know of each (exporters/onnx/quantize.py derives its
presets from it).

A level names the best set a target's kernels may use; it implies the ones below it on its architecture
(avx512_vnni implies avx2). Dependency-free: the serving path reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import ConfigError

X86_64 = "x86_64"
ARM64 = "arm64"
# platform.machine()'s spellings of each architecture (Linux says aarch64, macOS arm64, Windows AMD64)
MACHINE_NAMES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": ARM64, "arm64": ARM64}


@dataclass(frozen=True)
class InstructionSet:
    name: str  # what a profile's cpu_isa says
    architecture: str  # X86_64 or ARM64
    cpuinfo_flag: str | None  # the /proc/cpuinfo flag that shows this level; None: the architecture's baseline
    # u8 x s8 multiply-adds can saturate (AVX2's vpmaddubsw without VNNI, and SSE before it), so an int8
    # quantizer keeps weights to 7 bits there; VNNI and ARM's dot-product units accumulate without that.
    int8_products_saturate: bool


# Within an architecture, weakest first: detection takes the last one whose flag the CPU shows.
INSTRUCTION_SETS: tuple[InstructionSet, ...] = (
    InstructionSet("x86_64", X86_64, None, int8_products_saturate=True),
    InstructionSet("avx2", X86_64, "avx2", int8_products_saturate=True),
    InstructionSet("avx512_vnni", X86_64, "avx512_vnni", int8_products_saturate=False),
    InstructionSet("arm64", ARM64, None, int8_products_saturate=False),
)
CPU_ISAS = tuple(sorted(isa.name for isa in INSTRUCTION_SETS))
# Where nothing says which CPU a model is for: correct on every x86-64 CPU that llama.cpp's and ONNX Runtime's
# prebuilt wheels run on.
CONSERVATIVE_X86 = "avx2"


def instruction_set(name: str) -> InstructionSet:
    """The table's entry called ``name``; a ConfigError listing the valid names otherwise."""
    for isa in INSTRUCTION_SETS:
        if isa.name == name:
            return isa
    raise ConfigError(f"unknown CPU instruction set {name!r}", f"valid: {', '.join(CPU_ISAS)}")


def detect_instruction_set(machine: str, cpu_flags: set[str]) -> InstructionSet:
    """The best level a CPU of architecture ``machine`` (platform.machine()) with these /proc/cpuinfo flags
    runs; an unknown architecture gets the x86-64 baseline, as before this table existed."""
    architecture = MACHINE_NAMES.get(machine.lower(), X86_64)
    candidates = [isa for isa in INSTRUCTION_SETS if isa.architecture == architecture]
    shown = [isa for isa in candidates if isa.cpuinfo_flag is None or isa.cpuinfo_flag in cpu_flags]
    return shown[-1] if shown else candidates[0]
