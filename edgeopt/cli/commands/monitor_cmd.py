"""``edgeopt monitor [URL]``: a live terminal dashboard of a running server (or of one it starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt.errors import ConfigError

DEFAULT_URL = "http://127.0.0.1:8000"


def monitor(
    url: Annotated[str, typer.Argument(help="Base URL of an edgeopt server.")] = DEFAULT_URL,
    refresh: Annotated[float, typer.Option("--refresh", "-r", help="Seconds between polls.")] = 1.0,
    window: Annotated[float, typer.Option("--window", help="Seconds of history the latency percentiles cover.")] = 10.0,
    bundle: Annotated[Optional[Path], typer.Option("--bundle", "-b",
                                                   help="Start `edgeopt serve BUNDLE` on a free port and watch it; "
                                                        "the server stops when the dashboard exits.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="With --bundle: CPU threads for the runtime.")] = None,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar="EDGEOPT_API_KEY",
                                                   help="The server's --api-key (its request table is behind it).")] = None,
) -> None:
    """Watch latency (TTFT, inter-token, end-to-end), tokens/s, queue, KV cache and memory live. Keys: q p r."""
    check_intervals(refresh, window)
    from edgeopt.monitor.app import MonitorApp  # textual is imported only when the dashboard runs

    if bundle is None:
        MonitorApp(url, refresh_s=refresh, window_s=window, api_key=api_key).run()
        return
    from edgeopt.store.bundle import read_manifest
    from edgeopt.server.startup.serve_process import launched_server

    if url != DEFAULT_URL:
        raise ConfigError(f"got both a URL ({url}) and --bundle {bundle}",
                          "pass a URL to watch a running server, or --bundle to start one, not both")
    read_manifest(bundle)  # a missing or broken bundle fails here, with the bundle's own message
    typer.echo(f"starting edgeopt serve {bundle} …", err=True)
    with launched_server(bundle, api_key=api_key, threads=threads) as server:
        MonitorApp(server.base_url, refresh_s=refresh, window_s=window, api_key=api_key).run()
    typer.echo(f"server stopped; its log is {server.log_path}", err=True)


def check_intervals(refresh: float, window: float) -> None:
    if not refresh > 0:
        raise ConfigError(f"--refresh {refresh} must be a positive number of seconds", "e.g. --refresh 1")
    if window < refresh:
        raise ConfigError(f"--window {window} is shorter than --refresh {refresh}",
                          f"use a window of a few polls, e.g. --window {max(10 * refresh, 10):g}")
