"""``edgeopt plan MODEL --devices N`` / ``--workers ...``: print (or --json) the split across boards."""

from __future__ import annotations

import json

from rich.console import Console
from rich.text import Text

from edgeopt.cli.table import Column, print_line, print_table
from edgeopt.planning import MIB, AcrossDevices, DevicesPlan, ModelSource, PlanRequest, plan_for
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.split import describe
from edgeopt.sizing.split_shape import WorkerMemory


def asked_workers(text: str) -> list[WorkerMemory]:
    """Each running worker's advertised memory, asked over its own connection (edgeopt.rpc.protocol)."""
    from edgeopt.rpc.binaries import head_protocol_version
    from edgeopt.rpc.endpoints import parse_workers
    from edgeopt.rpc.protocol import probe_workers

    infos = probe_workers(parse_workers(text), head_protocol_version())
    return [WorkerMemory(str(info.endpoint), info.free_bytes) for info in infos]


def plan_devices(model: ModelSource, profile: DeviceProfile, request: PlanRequest, devices: int | None,
                 workers: str | None, as_json: bool) -> None:
    across = AcrossDevices(model, devices, tuple(asked_workers(workers)) if workers else None)
    result = plan_for(across, profile, request)
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
