"""Real `edgeopt worker` processes on 127.0.0.1 for the split tests (llama.cpp's RPC server, capped)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgeopt.errors import MissingDependencyError
from edgeopt.rpc.binaries import rpc_library, worker_binary
from edgeopt.rpc.endpoints import Endpoint
from edgeopt.rpc.protocol import answers
from edgeopt.server.startup.serve_process import free_port

WORKER_MEMORY_MIB = 70  # SmolLM2-135M Q4_1: 66 MiB of layers + a 29 MiB tied output copy: fits neither alone
START_TIMEOUT_S = 20.0


def require_rpc_build() -> None:
    """The split tests need the RPC build (make setup builds it); its absence is a failure with the fix."""
    try:
        worker_binary(), rpc_library()
    except MissingDependencyError as exc:
        pytest.fail(f"{exc.message} ({exc.hint})")


@dataclass
class Worker:
    endpoint: Endpoint
    memory_mib: int
    log_path: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "edgeopt.cli.app", "worker", "--port", str(self.endpoint.port),
                   "--memory", f"{self.memory_mib}MiB", "--threads", "1"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(self.endpoint, timeout_s=0.5):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.endpoint} did not start: {self.log_path.read_text()[-500:]}")
            time.sleep(0.1)

    def freeze(self) -> None:
        """SIGSTOP: a worker that keeps its connections but never answers (a board that lost power behind a
        switch: nothing refuses or resets the connection)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: what a board losing power looks like to the head on loopback (the port refuses at once)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a frozen worker must not outlive the test either
            self.process.kill()
            self.process.wait(timeout=10)


@contextmanager
def running_workers(tmp_path: Path, count: int = 2, memory_mib: int = WORKER_MEMORY_MIB) -> Iterator[list[Worker]]:
    require_rpc_build()
    workers = [Worker(Endpoint("127.0.0.1", free_port()), memory_mib, tmp_path / f"worker{i}.log")
               for i in range(count)]
    try:
        for worker in workers:
            worker.start()
        yield workers
    finally:
        for worker in workers:
            worker.kill()


def workers_flag(workers: list[Worker]) -> str:
    return ",".join(str(worker.endpoint) for worker in workers)
