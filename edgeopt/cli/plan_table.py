"""A plan as the terminal shows it (edgeopt plan, edgeopt optimize): the heading, a row per candidate, what serve
holds resident for the one shown, and the recommendation; for optimize, what it will write."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from edgeopt.cli.table import Column, print_line, print_table
from edgeopt.planning import MIB, Candidate, OptimizePlan, Plan

PLAN_COLUMNS = (
    Column("candidate"), Column("weights MiB", "right"), Column("KV type", "right"),
    Column("KV layout", "right", essential=False), Column("KV/token KiB", "right", essential=False),
    Column("KV capacity tok", "right"), Column("max seqs @ctx", "right"), Column("resident MiB", "right"),
    Column("fits", "right"),
)


def print_plan(result: Plan, params: int, console: Console | None = None) -> None:
    console = console or Console()
    shown = result.recommended or (result.candidates[0] if len(result.candidates) == 1 else None)
    resident = resident_line(shown, result.concurrency) if shown is not None and shown.resident is not None else None
    print_line(console, f"[bold]{result.model}[/] ({params / 1e6:.1f}M parameters) on [bold]{result.target}[/]: "
                        f"{result.usable_memory_bytes / MIB:.0f} MiB usable, context {result.context}, "
                        f"concurrency {result.concurrency}")
    rows = []
    for c in result.candidates:
        total = f"{c.resident.total_bytes / MIB:.0f}" if c.resident else "-"
        rows.append([("*" if result.recommended == c else "") + c.label, f"{c.weight_bytes / MIB:.1f}",
                     c.kv_type or "fixed", c.kv_layout or "-", f"{c.kv_bytes_per_token / 1024:.2f}",
                     str(c.kv_token_capacity), str(c.max_concurrency), total, "yes" if c.fits else Text("no", style="red")])
    print_table(PLAN_COLUMNS, rows, console)
    if result.candidates and all(c.kv_bytes_per_token == 0 for c in result.candidates):
        print_line(console, "encoder: no KV cache (KV columns do not apply); fits = weights + runtime overhead")
    if resident is not None:
        print_line(console, resident)
    if result.recommended:
        print_line(console, f"recommended: [bold]{result.recommended.label}[/]")
    else:
        print_line(console, "[red]nothing fits[/]: lower --context/--concurrency or prune (see edgeopt optimize --fit)")


def resident_line(candidate: Candidate, sequences: int) -> str:
    """What serve holds resident for ``candidate``, by part (edgeopt.sizing.resident)."""
    r = candidate.resident
    assert r is not None
    kv = ""
    if r.kv_bytes_per_token:
        prefixes = (f", cached prefixes {r.kv_prefix_cells} cells {r.kv_prefix_bytes / MIB:.0f} MiB" if r.kv_prefix_cells
                    else ", cached prefixes share those cells")
        kv = (f"KV {(r.kv_live_bytes + r.kv_prefix_bytes) / MIB:.0f} (live {sequences} "
              f"sequence{'s' if sequences != 1 else ''} "
              f"{r.kv_live_cells} cells {r.kv_live_bytes / MIB:.0f} MiB{prefixes}), ")
    return (f"serve holds {r.total_bytes / MIB:.0f} MiB resident ({candidate.label}): weights "
            f"{r.weights_bytes / MIB:.0f}, {kv}runtime buffers {r.runtime_buffer_bytes / MIB:.0f}, process "
            f"{r.process_bytes / MIB:.0f} MiB")


def print_optimize_plan(resolved: OptimizePlan, ignore_fit: bool, echo: Callable[[str], None] = print) -> None:
    """What optimize will write: the draft's shape (--draft-for), the plan, --fit's prune, a warning for a row
    that does not fit, and the bundle it writes."""
    if resolved.draft_recipe is not None:
        echo(resolved.draft_recipe.describe())
    print_plan(resolved.plan, resolved.source_parameters)
    if resolved.fit_ratio is not None:
        echo(f"fit: the model does not fit {resolved.profile.name}; pruning {resolved.fit_ratio:.0%} of its "
             "non-embedding parameters makes it fit")
    chosen = resolved.chosen
    if not chosen.fits:
        echo(f"warning: {chosen.label} does not fit {resolved.profile.name} at {resolved.plan.concurrency} x "
             f"{resolved.plan.context} tokens (fits: no above); " +
             ("written because --ignore-fit was given" if ignore_fit else "a dry run writes nothing"))
    if resolved.workshop is not None:
        for line in resolved.workshop.lines():
            echo(line)
    kv = f" with a {resolved.kv_type} KV cache" if resolved.kv_type else ""
    echo(f"will write {resolved.format}:{resolved.quant}{kv} for runtime {resolved.runtime} to {resolved.output}")
