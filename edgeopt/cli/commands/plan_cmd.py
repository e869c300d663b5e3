from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from edgeopt.byte_sizes import parse_size, read_memory, read_size
from edgeopt.cli.options import Context, JsonOut, KvType, Target
from edgeopt.cli.table import Column, print_line, print_table
from edgeopt.errors import ConfigError
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.sources.model_spec import load_model_spec
from edgeopt.optimize.pipeline import check_mix_size, sized_quant
from edgeopt.planning.bundle import is_bundle_dir
from edgeopt.planning.checkpoint import MIB, Candidate, Plan, make_plan, size_candidate
from edgeopt.profiles import GIB, load_profile


def plan(
    model: Annotated[str, typer.Argument(help="Hugging Face hub id or local checkpoint directory, a GGUF file, or a "
                                              "bundle directory written by edgeopt optimize (planned as serve sizes it).")],
    target: Target = "host",
    context: Context = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", "-n", min=1, help="Sequences that must fit at full context at once (default 1; a bundle: serve's --max-concurrency, default what the KV budget affords).")] = None,
    memory: Annotated[Optional[str], typer.Option("--memory", help="Override usable memory: e.g. 4GiB, 4GB (decimal), or a bare number of MiB.")] = None,
    kv_type: KvType = None,
    size: Annotated[Optional[str], typer.Option("--size", help="Also size a GGUF mix made to this file size (e.g. 90MiB, 105453920B; optimize --size).")] = None,
    prefix_cache_memory: Annotated[Optional[str], typer.Option("--prefix-cache-memory", help="A bundle: plan serve's --prefix-cache-memory (KV memory for cached prefixes beyond the live sequences' cells).")] = None,
    draft: Annotated[Optional[Path], typer.Option("--draft", exists=True, help="A bundle or GGUF file: plan serve's --draft (the draft model's weights, runtime and KV come out of the budget first).")] = None,
    as_json: JsonOut = False,
    devices: Annotated[Optional[int], typer.Option("--devices", min=2, help="Split across N boards of --target "
                                                   "(the head and N-1 `edgeopt worker`s): layers and KV per device.")] = None,
    workers: Annotated[Optional[str], typer.Option("--workers", help="Split across the head (--target) and these "
                                                   "running workers, with the memory each offers: host:port,...")] = None,
) -> None:
    """Predict weight and KV sizes per format/quant from the model's config alone, and recommend one (a GGUF
    file or a bundle: its own size and shape, as serve will size it)."""
    profile = load_profile(target)
    memory_bytes = (read_memory(memory, "--memory", int(profile.total_memory_gb * GIB), profile.name)
                    if memory is not None else None)
    if devices is not None or workers is not None:
        from edgeopt.cli.commands.plan_devices_cmd import plan_devices

        plan_devices(model, profile, context, concurrency or 1, memory_bytes, kv_type, devices, workers, as_json)
        return
    if size is not None and (is_gguf_file(Path(model)) or is_bundle_dir(Path(model))):
        raise ConfigError(f"--size {size} sizes a mix made from a checkpoint; {model} is already quantized",
                          "drop --size, or plan the checkpoint it was made from")
    parsed_kv_type = parse_kv_type(kv_type, "gguf") if kv_type else None
    if draft is not None:
        plan_draft_pair(Path(model), draft, profile, context, concurrency, memory_bytes, parsed_kv_type, as_json)
        return
    if prefix_cache_memory is not None and not is_bundle_dir(Path(model)):
        raise ConfigError(f"--prefix-cache-memory {prefix_cache_memory} plans a bundle as serve sizes it; {model} is "
                          "not a bundle", "drop --prefix-cache-memory, or plan the bundle made from it")
    if is_bundle_dir(Path(model)):  # what the user holds on the device: planned as serve sizes it
        from edgeopt.planning.bundle import bundle_parameters, plan_bundle

        params = bundle_parameters(Path(model))
        result = plan_bundle(Path(model), profile, context, concurrency, memory_bytes, kv_type,
                             parse_size(prefix_cache_memory, "--prefix-cache-memory") if prefix_cache_memory else None)
    elif is_gguf_file(Path(model)):  # a GGUF file: its own quant and shape, sized as serve will size it
        from edgeopt.sources.gguf_model import gguf_metadata
        from edgeopt.planning.gguf_file import plan_gguf_file

        meta = gguf_metadata(Path(model))
        params = meta.parameter_count
        result = plan_gguf_file(Path(model), profile, context, concurrency or 1, memory_bytes=memory_bytes,
                                kv_type=parsed_kv_type)
    else:
        spec = load_model_spec(model)
        params = spec.num_parameters
        result = make_plan(spec, profile, context, concurrency or 1, memory_bytes=memory_bytes,
                           kv_type=parsed_kv_type)
        if size is not None:  # what a mix of that size leaves for the KV cache
            written = read_size(size, "--size")
            check_mix_size(spec, written)
            result.candidates.append(size_candidate(spec, profile, "gguf", sized_quant("gguf", None, written.bytes),
                                                    result.context, result.concurrency, memory_bytes, parsed_kv_type,
                                                    file_bytes=written.bytes))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print_plan(result, params)


def plan_draft_pair(model: Path, draft: Path, profile, context: int | None, concurrency: int | None,
                    memory_bytes: int | None, kv_type: str | None, as_json: bool) -> None:
    """``--draft``: the target planned as ``serve MODEL --draft DRAFT`` sizes it, and the draft's share."""
    from edgeopt.planning.draft import plan_beside_draft

    if not (is_gguf_file(model) or is_bundle_dir(model)):
        raise ConfigError(f"--draft {draft} plans serve --draft, which serves a GGUF bundle or file; {model} is neither",
                          "plan the GGUF bundle or file you will serve")
    result, draft_plan = plan_beside_draft(model, draft, profile, context, concurrency, memory_bytes, kv_type)
    if as_json:
        print(json.dumps(result.to_dict() | {"draft": draft_plan.to_dict()}, indent=2))
        return
    from edgeopt.sources.gguf_model import gguf_metadata

    source = model if is_gguf_file(model) else model / read_manifest_file(model)
    print_plan(result, gguf_metadata(source).parameter_count)
    console = Console()
    print_line(console, draft_plan.describe())
    if result.candidates and result.candidates[0].resident is not None:
        total = result.candidates[0].resident.total_bytes + draft_plan.total_bytes
        print_line(console, f"serve holds {total / MIB:.0f} MiB resident with the draft")


def read_manifest_file(bundle: Path) -> str:
    from edgeopt.store.bundle import read_manifest

    return read_manifest(bundle).model_file


PLAN_COLUMNS = (
    Column("candidate"), Column("weights MiB", "right"), Column("KV type", "right"),
    Column("KV layout", "right", essential=False), Column("KV/token KiB", "right", essential=False),
    Column("KV capacity tok", "right"), Column("max seqs @ctx", "right"), Column("resident MiB", "right"),
    Column("fits", "right"),
)


def print_plan(result: Plan, params: int, console: Console | None = None) -> None:
    console = console or Console()
    print_line(console, f"[bold]{result.model}[/] ({params / 1e6:.1f}M parameters) on [bold]{result.target}[/]: "
                        f"{result.usable_memory_bytes / MIB:.0f} MiB usable, context {result.context}, "
                        f"concurrency {result.concurrency}")
    rows = []
    for c in result.candidates:
        mark = "*" if result.recommended == c else ""
        resident = f"{c.resident.total_bytes / MIB:.0f}" if c.resident else "-"
        rows.append([mark + c.label, f"{c.weight_bytes / MIB:.1f}", c.kv_type or "fixed", c.kv_layout or "-",
                     f"{c.kv_bytes_per_token / 1024:.2f}", str(c.kv_token_capacity), str(c.max_concurrency),
                     resident, "yes" if c.fits else Text("no", style="red")])
    print_table(PLAN_COLUMNS, rows, console)
    if result.candidates and all(c.kv_bytes_per_token == 0 for c in result.candidates):
        print_line(console, "encoder: no KV cache (KV columns do not apply); fits = weights + runtime overhead")
    shown = result.recommended or (result.candidates[0] if len(result.candidates) == 1 else None)
    if shown is not None and shown.resident is not None:
        print_line(console, resident_line(shown, result.concurrency))
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
