from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from edgeopt.cli_options import JsonOut
from profiles import FAMILY_DEFAULTS, all_profiles


def profiles(as_json: JsonOut = False) -> None:
    """List the device profiles (--target values) with memory, accelerator and defaults."""
    items = all_profiles()
    if as_json:
        print(json.dumps([p.to_dict() for p in items], indent=2))
        return
    table = Table(title="device profiles")
    for col in ("name", "memory GB", "usable GB", "unified", "accelerator", "cores", "ISA", "format", "quant", "runtime"):
        table.add_column(col)
    for p in items:
        table.add_row(p.name, f"{p.total_memory_gb:g}", f"{p.usable_memory_bytes / 1024**3:.1f}",
                      "yes" if p.unified_memory else "no", p.accelerator, str(p.cores), p.cpu_isa,
                      p.preferred_format, p.default_quant, p.default_runtime)
    console = Console()
    console.print(table)
    console.print("aliases: " + ", ".join(f"{a} -> {n}" for a, n in FAMILY_DEFAULTS.items()))
