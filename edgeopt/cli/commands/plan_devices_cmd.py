"""``edgeopt plan MODEL --devices N`` / ``--workers ...``: print (or --json) the split across boards."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.text import Text

from edgeopt.cli.table import Column, print_line, print_table
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.planning.checkpoint import MIB
from edgeopt.planning.devices import DevicesPlan, plan_across_devices, worker_memories
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.sizing.shape import DEFAULT_CONTEXT
from edgeopt.sizing.split import describe
from edgeopt.sizing.split_shape import WorkerMemory


def asked_workers(text: str) -> list[WorkerMemory]:
    """Each running worker's advertised memory, asked over its own connection (edgeopt.rpc.protocol)."""
    from edgeopt.rpc.binaries import head_protocol_version
    from edgeopt.rpc.endpoints import parse_workers
    from edgeopt.rpc.protocol import probe_workers

    infos = probe_workers(parse_workers(text), head_protocol_version())
    return [WorkerMemory(str(info.endpoint), info.free_bytes) for info in infos]


def plan_devices(model: str, profile: DeviceProfile, context: int | None, concurrency: int, memory_bytes: int | None,
                 kv_type: str | None, devices: int | None, workers: str | None, as_json: bool) -> None:
    memories = worker_memories(profile, devices, asked_workers(workers) if workers else None, memory_bytes)
    parsed_kv = parse_kv_type(kv_type, "gguf") if kv_type else None
    if is_gguf_file(Path(model)):
        from edgeopt.sources.gguf_model import gguf_metadata, gguf_model_spec

        spec = gguf_model_spec(gguf_metadata(Path(model)))
        gguf_file: Path | None = Path(model)
    else:
        from edgeopt.sources.model_spec import load_model_spec

        spec, gguf_file = load_model_spec(model), None
    context = context or min(spec.max_position_embeddings, DEFAULT_CONTEXT)
    result = plan_across_devices(spec, profile, memories, context, concurrency, memory_bytes, parsed_kv,
                                 gguf_file=gguf_file, gguf_quant=Path(model).name if gguf_file else None)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print_devices_plan(result)


COLUMNS = (Column("quant"), Column("weights MiB", "right"), Column("largest device MiB", "right"),
           Column("one device", "right"), Column("split fits", "right"))


def print_devices_plan(result: DevicesPlan, console: Console | None = None) -> None:
    console = console or Console()
    print_line(console, f"[bold]{result.model}[/] across {result.devices} devices (head: {result.target}): context "
                        f"{result.context} x {result.concurrency} sequences, {result.kv_type} KV")
    rows = []
    for c in result.candidates:
        mark = "*" if c is result.recommended else ""
        largest = max(share.total_bytes for share in c.split.shares)
        rows.append([mark + c.quant, f"{c.weights_bytes / MIB:.0f}", f"{largest / MIB:.0f}",
                     "fits" if c.split.fits_one_device else "no",
                     "yes" if c.split.fits else Text("no", style="red")])
    print_table(COLUMNS, rows, console)
    if result.recommended is None:
        print_line(console, "[red]fits across none[/]: add devices, lower --context/--concurrency, or prune")
        return
    chosen = result.recommended
    where = "fits one device too" if chosen.split.fits_one_device else "does not fit one device"
    print_line(console, f"recommended: [bold]{chosen.quant}[/] ({where}); split:")
    for line in describe(chosen.split):
        print_line(console, f"  {line}")
