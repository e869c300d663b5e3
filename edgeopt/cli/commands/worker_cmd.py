"""``edgeopt worker``: serve this device's memory and compute to an ``edgeopt serve --workers`` head."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from edgeopt.cli.options import Target, Threads
from edgeopt.rpc.endpoints import DEFAULT_WORKER_PORT


def worker(
    host: Annotated[str, typer.Option(help="Address to bind. Anything but loopback needs --expose: the RPC "
                                           "protocol has no authentication.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = DEFAULT_WORKER_PORT,
    memory: Annotated[Optional[str], typer.Option("--memory", help="Memory this worker offers and enforces "
                                                                   "(e.g. 2GiB). Default: the --target's usable memory.")] = None,
    target: Target = "host",
    threads: Threads = None,
    expose: Annotated[bool, typer.Option("--expose", help="Allow a --host other than loopback (a private network "
                                                          "only: anyone reaching the port uses this device).")] = False,
    cache: Annotated[bool, typer.Option("--cache", help="Keep large tensors in llama.cpp's RPC cache "
                                                        "(~/.cache/llama.cpp/rpc) so a restarted head loads faster.")] = False,
) -> None:
    """Offer this device to a head that splits a model across boards (llama.cpp's RPC server)."""
    from pathlib import Path

    from edgeopt.cli.commands.serve_cmd import parse_memory
    from edgeopt.profiles import load_profile
    from edgeopt.profiles.host import usable_cpu_count
    from edgeopt.rpc.worker import WorkerOptions, check_exposure, run_worker

    check_exposure(host, expose)  # before anything else: the refusal must not depend on the build
    profile = load_profile(target)
    memory_bytes = parse_memory(memory) if memory else profile.usable_memory_bytes
    cache_dir = str(Path.home() / ".cache" / "llama.cpp" / "rpc") if cache else None
    if cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    run_worker(WorkerOptions(host=host, port=port, memory_bytes=memory_bytes,
                             threads=threads or max(1, min(profile.cores or usable_cpu_count(), usable_cpu_count())),
                             expose=expose, cache_dir=cache_dir))
