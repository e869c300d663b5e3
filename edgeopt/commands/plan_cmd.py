from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from edgeopt.byte_sizes import parse_size
from edgeopt.cli_options import Concurrency, Context, JsonOut, KvType, ModelArg, Target
from edgeopt.cli_table import Column, print_line, print_table
from edgeopt.errors import ConfigError
from edgeopt.gguf_metadata import is_gguf_file
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.model_spec import load_model_spec
from edgeopt.pipeline import sized_quant
from edgeopt.plan import MIB, Plan, make_plan, size_candidate
from edgeopt.profiles import load_profile


def plan(
    model: ModelArg,
    target: Target = "host",
    context: Context = None,
    concurrency: Concurrency = 1,
    memory_mb: Annotated[Optional[int], typer.Option("--memory", help="Override usable memory (MiB).")] = None,
    kv_type: KvType = None,
    size: Annotated[Optional[str], typer.Option("--size", help="Also size a GGUF mix made to this file size (e.g. 90MiB; optimize --size).")] = None,
    as_json: JsonOut = False,
    devices: Annotated[Optional[int], typer.Option("--devices", min=2, help="Split across N boards of --target "
                                                   "(the head and N-1 `edgeopt worker`s): layers and KV per device.")] = None,
    workers: Annotated[Optional[str], typer.Option("--workers", help="Split across the head (--target) and these "
                                                   "running workers, with the memory each offers: host:port,...")] = None,
) -> None:
    """Predict weight and KV sizes per format/quant from the model's config alone, and recommend one (a GGUF
    file: its own size and shape, as serve will size it)."""
    profile = load_profile(target)
    if devices is not None or workers is not None:
        from edgeopt.commands.plan_devices_cmd import plan_devices

        plan_devices(model, profile, context, concurrency, memory_mb, kv_type, devices, workers, as_json)
        return
    if size is not None and is_gguf_file(Path(model)):
        raise ConfigError(f"--size {size} sizes a mix made from a checkpoint; {model} is already a GGUF file",
                          "drop --size, or plan the checkpoint it was made from")
    if is_gguf_file(Path(model)):  # a GGUF file: its own quant and shape, sized as serve will size it
        from edgeopt.gguf_model import gguf_metadata
        from edgeopt.plan_gguf import plan_gguf_file

        meta = gguf_metadata(Path(model))
        params = meta.parameter_count
        result = plan_gguf_file(Path(model), profile, context, concurrency,
                                memory_bytes=memory_mb * MIB if memory_mb else None,
                                kv_type=parse_kv_type(kv_type, "gguf") if kv_type else None)
    else:
        spec = load_model_spec(model)
        params = spec.num_parameters
        memory_bytes = memory_mb * MIB if memory_mb else None
        parsed_kv_type = parse_kv_type(kv_type, "gguf") if kv_type else None
        result = make_plan(spec, profile, context, concurrency, memory_bytes=memory_bytes, kv_type=parsed_kv_type)
        if size is not None:  # what a mix of that size leaves for the KV cache
            file_bytes = parse_size(size, "--size")
            result.candidates.append(size_candidate(spec, profile, "gguf", sized_quant("gguf", None, file_bytes),
                                                    result.context, concurrency, memory_bytes, parsed_kv_type,
                                                    file_bytes=file_bytes))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print_plan(result, params)


PLAN_COLUMNS = (
    Column("candidate"), Column("weights MiB", "right"), Column("KV type", "right"),
    Column("KV layout", "right", essential=False), Column("KV/token KiB", "right", essential=False),
    Column("KV capacity tok", "right"), Column("max seqs @ctx", "right"), Column("fits", "right"),
)


def print_plan(result: Plan, params: int, console: Console | None = None) -> None:
    console = console or Console()
    print_line(console, f"[bold]{result.model}[/] ({params / 1e6:.1f}M parameters) on [bold]{result.target}[/]: "
                        f"{result.usable_memory_bytes / MIB:.0f} MiB usable, context {result.context}, "
                        f"concurrency {result.concurrency}")
    rows = []
    for c in result.candidates:
        mark = "*" if result.recommended == c else ""
        rows.append([mark + c.label, f"{c.weight_bytes / MIB:.1f}", c.kv_type or "fixed", c.kv_layout or "-",
                     f"{c.kv_bytes_per_token / 1024:.2f}", str(c.kv_token_capacity), str(c.max_concurrency),
                     "yes" if c.fits else Text("no", style="red")])
    print_table(PLAN_COLUMNS, rows, console)
    if result.candidates and all(c.kv_bytes_per_token == 0 for c in result.candidates):
        print_line(console, "encoder: no KV cache (KV columns do not apply); fits = weights + runtime overhead")
    if result.recommended:
        print_line(console, f"recommended: [bold]{result.recommended.label}[/]")
    else:
        print_line(console, "[red]nothing fits[/]: lower --context/--concurrency or prune (see edgeopt optimize --fit)")
