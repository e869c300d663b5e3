from __future__ import annotations

import json

from edgeopt.cli.options import JsonOut
from edgeopt.cli.table import Column, print_line, print_table
from edgeopt.profiles import FAMILY_DEFAULTS, all_profiles
from edgeopt.profiles.platform import CpuCores

PROFILE_COLUMNS = (
    Column("name"), Column("memory GB", "right"), Column("usable GB", "right"), Column("unified", essential=False),
    Column("accelerator"), Column("cores", "right", essential=False), Column("ISA", essential=False),
    Column("format"), Column("quant"), Column("runtime", essential=False),
)


def profiles(as_json: JsonOut = False) -> None:
    """List the device profiles (--target values) with memory, accelerator and defaults."""
    items = all_profiles()
    if as_json:
        print(json.dumps([p.to_dict() for p in items], indent=2))
        return
    rows = [[p.name, f"{p.total_memory_gb:g}", f"{p.usable_memory_bytes / 1024**3:.1f}",
             "yes" if p.platform.memory_shared_with_accelerator else "no", p.platform.accelerator_label,
             _cores(p.platform.cpu), p.cpu_isa, p.preferred_format,
             p.default_quant, p.default_runtime] for p in items]
    from rich.console import Console  # here: `edgeopt serve` imports this module and prints no table

    console = Console()
    print_table(PROFILE_COLUMNS, rows, console, title="device profiles")
    print_line(console, "aliases: " + ", ".join(f"{a} -> {n}" for a, n in FAMILY_DEFAULTS.items()))


def _cores(cpu: CpuCores) -> str:
    """``8``, or ``4+4`` (big + little) for a big.LITTLE CPU."""
    return f"{cpu.big_cores}+{cpu.little_cores}" if cpu.little_cores else str(cpu.cores)
