"""Start ``edgeopt serve`` as a child process for a benchmark, wait until healthy, stop it afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from edgeopt.errors import BackendError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``with ServerProcess(bundle, ["--max-concurrency", "1"]) as server: server.url ...``"""

    def __init__(self, bundle: Path, extra_args: list[str], startup_timeout_s: float = 300.0) -> None:
        self.bundle = Path(bundle)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "edgeopt.cli", "serve", str(self.bundle), "--port", str(self.port),
                     "--log-level", "warning", *extra_args]
        self.startup_timeout_s = startup_timeout_s
        self.log = tempfile.NamedTemporaryFile(prefix="edgeopt-serve-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ))
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BackendError(f"edgeopt serve exited with code {self.proc.returncode} during startup:\n"
                                   f"{self.log_tail()}", f"command: {' '.join(self.args)}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise BackendError(f"edgeopt serve was not healthy after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def rss_bytes(self) -> int:
        assert self.proc is not None
        return psutil.Process(self.proc.pid).memory_info().rss

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
