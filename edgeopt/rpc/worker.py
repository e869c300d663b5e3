"""``edgeopt worker``: this device's memory and compute offered to a head, through llama.cpp's RPC server.

The RPC protocol carries no authentication and lets the head allocate memory and run graphs on the
worker: whoever reaches the port uses the device. So a worker binds loopback by default; any other
address needs ``--expose``, and then says why that is a risk every time it starts.

The worker advertises (and enforces) the memory it may use: ``--memory``, else the ``--target`` profile's
usable memory (default ``host``: this machine's, cgroup limits included). The head plans with what it
advertises (edgeopt plan --workers, edgeopt serve --workers).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from edgeopt.errors import ConfigError
from edgeopt.rpc.binaries import worker_binary
from edgeopt.rpc.endpoints import is_loopback

MIB = 1024**2
EXPOSURE_WARNING = ("edgeopt worker: listening on {host}:{port}, beyond this machine. llama.cpp's RPC protocol has no "
                    "authentication: anyone who reaches this port can allocate this device's memory and run "
                    "computations on it. Use a private network (or a VPN/SSH tunnel) and a firewall.")


@dataclass(frozen=True)
class WorkerOptions:
    host: str = "127.0.0.1"
    port: int = 50052
    memory_bytes: int = 0  # what the worker advertises and enforces
    threads: int = 1
    expose: bool = False  # --expose: the operator accepts a non-loopback address
    cache_dir: str | None = None  # llama.cpp's tensor cache (rpc-server -c): large tensors kept across loads


def check_exposure(host: str, expose: bool) -> None:
    if not is_loopback(host) and not expose:
        raise ConfigError(
            f"--host {host} would expose llama.cpp's RPC protocol, which has no authentication, beyond this machine",
            "keep the default 127.0.0.1 (reach it through an SSH tunnel), or bind a private network's address "
            "and pass --expose")


def worker_command(options: WorkerOptions) -> list[str]:
    if options.memory_bytes < MIB:
        raise ConfigError(f"--memory {options.memory_bytes} bytes is less than 1 MiB", "write e.g. 2GiB")
    if not 1 <= options.port <= 65535:
        raise ConfigError(f"--port {options.port} is out of range", "use 1..65535")
    command = [str(worker_binary()), "--host", options.host, "--port", str(options.port),
               "--threads", str(options.threads), "--mem", str(options.memory_bytes // MIB)]
    if options.cache_dir:
        command += ["--cache-dir", options.cache_dir]
    return command


def run_worker(options: WorkerOptions) -> None:
    """Become the RPC server (exec: a signal to this process reaches the server, and no child is orphaned)."""
    check_exposure(options.host, options.expose)
    command = worker_command(options)
    if not is_loopback(options.host):
        print(EXPOSURE_WARNING.format(host=options.host, port=options.port), file=sys.stderr, flush=True)
    print(f"edgeopt worker: {options.memory_bytes // MIB} MiB on {options.host}:{options.port}, "
          f"{options.threads} threads; heads connect with --workers {options.host}:{options.port}", flush=True)
    os.execv(command[0], command)
