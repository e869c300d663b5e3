"""The head's last act on a lost worker (edgeopt.rpc.lost_worker): requests in flight end with an error naming
the worker before the process goes, and ggml's abort runs the handler first (the real libggml-base of the
loaded llama_cpp, then the abort itself). The whole path with real workers: tests/rpc/test_loopback_split.py."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest

from edgeopt.engine import Engine, SamplingParams
from edgeopt.errors import BackendError
from edgeopt.rpc.endpoints import Endpoint
from edgeopt.rpc.lost_worker import LostWorker, refusing
from edgeopt.server.startup.serve_process import free_port
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

LONG = SamplingParams(max_tokens=500, temperature=0.0, ignore_eos=True)


class StallingRuntime(FakeRuntime):
    """After a few steps, a step waits as llama.cpp's waits on a dispatcher that will never answer."""

    def __init__(self, steps_before_stall: int) -> None:
        super().__init__()
        self.steps_left = steps_before_stall
        self.stalled = threading.Event()
        self.unstall = threading.Event()

    def step(self, batch):  # type: ignore[no-untyped-def]
        if self.steps_left == 0:
            self.stalled.set()
            self.unstall.wait(30)
        self.steps_left -= 1
        return super().step(batch)


def test_only_a_port_that_refuses_counts_as_down() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:  # listening, never accepting: a worker serving the head
        up = Endpoint("127.0.0.1", busy.getsockname()[1])
        dead = Endpoint("127.0.0.1", free_port())
        assert refusing([up, dead]) == [dead]


def test_requests_in_flight_end_with_the_worker_named_and_nothing_new_is_taken() -> None:
    runtime = StallingRuntime(steps_before_stall=3)
    engine, _ = make_engine(runtime)
    dead = Endpoint("127.0.0.1", free_port())
    busy = socket.create_server(("127.0.0.1", 0))  # the worker still up, serving the head's connection
    lost = LostWorker([f"127.0.0.1:{busy.getsockname()[1]}", str(dead)], lambda: engine, grace_s=5.0)

    async def body(e: Engine) -> None:
        streams = [e.add_request(name, [72, 101, 108], LONG) for name in ("a", "b")]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, runtime.stalled.wait, 10)
        started = time.monotonic()
        handler = loop.run_in_executor(None, lost.head_lost, "test: connection lost")  # the dispatcher's thread
        outputs = await asyncio.gather(*(stream.collect() for stream in streams))
        await handler  # returns once both streams took their error: then the process may go
        assert time.monotonic() - started < 2.0
        for out in outputs:
            assert out.finish_reason == "error"
            assert f"worker {dead} is down" in (out.error or "")
            assert f"edgeopt worker --port {dead.port}" in (out.error or "")
        assert not e.is_running and f"worker {dead} is down" in (e.failure or "")  # /health: 503 naming it
        with pytest.raises(BackendError):
            e.add_request("late", [72], LONG)
        second = threading.Thread(target=lost.head_lost, args=("another connection",), daemon=True)
        second.start()  # a second broken connection must not return: its return would abort the process
        second.join(0.3)
        assert second.is_alive()
        runtime.unstall.set()

    with busy:
        run_engine(engine, body)


def test_ggml_abort_runs_the_handler_and_still_aborts() -> None:
    script = """
import ctypes, pathlib, llama_cpp
from edgeopt.runtimes.llama_cpp.rpc import set_abort_handler
set_abort_handler(lambda message: print("handled:", message, flush=True))
base = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so.0"))
base.ggml_abort(b"ggml-rpc.cpp", 566, b"Remote RPC server crashed")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "handled: ggml-rpc.cpp:566: Remote RPC server crashed" in result.stdout, result.stderr[-1000:]
    assert result.returncode < 0  # SIGABRT: the handler delays the abort, it does not replace it
