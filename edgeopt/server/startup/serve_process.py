"""Run ``edgeopt serve BUNDLE`` as a child process on a free loopback port, wait for /health, stop it.

Used by ``edgeopt monitor --bundle``, ``edgeopt bench serve`` and ``make demo``. A separate process
(not a thread) keeps a dashboard or load generator responsive while the model computes, and sends
the server's logs to a file instead of the terminal.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from edgeopt.errors import BackendError


@dataclass(frozen=True)
class LaunchedServer:
    base_url: str
    log_path: Path
    process: subprocess.Popen


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def serve_command(bundle: Path | Sequence[Path], port: int, threads: int | None = None,
                  extra_args: Sequence[str] = ()) -> list[str]:
    """``edgeopt serve`` of one bundle, or of several (one server of several models)."""
    bundles = [str(bundle)] if isinstance(bundle, (str, Path)) else [str(b) for b in bundle]
    command = [sys.executable, "-m", "edgeopt.cli.app", "serve", *bundles, "--host", "127.0.0.1",
               "--port", str(port), "--log-level", "warning"]
    if threads:
        command += ["--threads", str(threads)]
    return command + list(extra_args)


@contextmanager
def launched_server(bundle: Path | Sequence[Path], api_key: str | None = None, threads: int | None = None,
                    extra_args: Sequence[str] = (), startup_timeout_s: float = 300.0,
                    log_path: Path | None = None, extra_env: Mapping[str, str] | None = None) -> Iterator[LaunchedServer]:
    """Start the server, wait until /health says ok, yield it, and always stop it afterwards.

    ``extra_args`` go to ``edgeopt serve`` as they are (e.g. ``["--memory", "1GiB"]``); the server's
    output goes to ``log_path`` (default: a new temporary file); ``extra_env`` adds to its environment.
    """
    port = free_port()
    if log_path is None:
        log_path = Path(tempfile.mkstemp(prefix="edgeopt-serve-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(serve_command(bundle, port, threads, extra_args), stdout=log,
                                   env=child_env(api_key) | dict(extra_env or {}),
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LaunchedServer(f"http://127.0.0.1:{port}", log_path, process)
    try:
        wait_until_healthy(server, startup_timeout_s)
        yield server
    finally:
        stop(process)


def child_env(api_key: str | None) -> dict[str, str]:
    """The key travels in the environment, not in argv, where every user's ``ps`` would show it."""
    env = dict(os.environ)
    env.pop("EDGEOPT_API_KEY", None)
    if api_key:
        env["EDGEOPT_API_KEY"] = api_key
    return env


def wait_until_healthy(server: LaunchedServer, timeout_s: float) -> None:
    """Block until GET /health answers 200; fail with the log's tail if the server dies or never gets there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BackendError(f"edgeopt serve exited with code {server.process.returncode} before it was ready: "
                               f"{_log_tail(server.log_path)}", f"see the full log in {server.log_path}")
        try:
            if httpx.get(server.base_url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.25)
    raise BackendError(f"edgeopt serve did not become healthy within {timeout_s:.0f}s at {server.base_url}",
                       f"see the log in {server.log_path}")


def stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
