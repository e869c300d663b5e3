from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgeopt.byte_sizes import read_memory
from edgeopt.cli.options import Context, JsonOut, KvType, Target
from edgeopt.cli.table import print_line
from edgeopt.planning import BesideDraft, PlanBesideDraft, PlanRequest, plan_for, source_of
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
    request = PlanRequest(context=context, concurrency=concurrency, memory_bytes=memory_bytes, kv_type=kv_type,
                          size=size, prefix_cache_memory=prefix_cache_memory)
    if devices is not None or workers is not None:
        from edgeopt.cli.commands.plan_devices_cmd import plan_devices

        plan_devices(source_of(model), profile, request, devices, workers, as_json)
        return
    if draft is not None:
        pair = plan_for(BesideDraft(source_of(model), source_of(draft)), profile, request)
        if as_json:
            print_json(pair.to_dict())
        else:
            print_pair(pair)
        return
    result = plan_for(source_of(model), profile, request)
    if as_json:
        print_json(result.to_dict())
    else:
        from edgeopt.cli.plan_table import print_plan  # rich: not imported by `edgeopt serve`

        print_plan(result, result.parameters)


def print_json(data: dict[str, Any]) -> None:
    print(json.dumps(data, indent=2))


def print_pair(pair: PlanBesideDraft) -> None:
    """``--draft``: the target's plan beside the draft, and the draft's share."""
    from rich.console import Console

    from edgeopt.cli.plan_table import print_plan

    print_plan(pair.plan, pair.plan.parameters)
    console = Console()
    print_line(console, pair.draft.describe())
    if pair.total_bytes is not None:
        print_line(console, pair.describe_total())
