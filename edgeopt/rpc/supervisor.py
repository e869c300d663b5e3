"""``edgeopt serve --workers``: the server runs as a child of a small supervisor that outlives it.

llama.cpp's RPC client aborts the process the moment a worker's connection breaks (ggml-rpc.cpp:
RPC_STATUS_ASSERT -> GGML_ABORT); nothing in the head can catch that. So the supervisor owns the listening
socket and runs the real server as a child on it. When the child dies and a worker no longer answers:

* requests in flight end at once with an in-band error naming the worker (edgeopt.rpc.lost_worker, in the
  child, before llama.cpp's abort goes on), and the child's connections close with it: no hang;
* the supervisor answers every request on the same socket with 503 naming the worker, /health included;
* it asks the workers twice a second; when all answer HELLO again it starts the server anew, which
  reloads the model onto them (its /health says "loading" meanwhile).

A child that exits while every worker answers failed for a reason of its own (it printed it): the
supervisor exits with its status. Ctrl-C / SIGTERM go to the child, and the supervisor then exits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence

from edgeopt.errors import WorkerError
from edgeopt.rpc.endpoints import Endpoint
from edgeopt.rpc.protocol import ProtocolVersion, probe_worker, probe_workers

log = logging.getLogger("edgeopt.rpc")
INHERITED_SOCKET_ENV = "EDGEOPT_SERVE_FD"  # = edgeopt.server.startup.launcher.INHERITED_SOCKET_ENV
POLL_S = 0.5
RETRY_AFTER_S = 5


def outage_message(down: Sequence[Endpoint]) -> str:
    names = ", ".join(str(endpoint) for endpoint in down)
    return (f"worker {names} is down; the head lost it and stopped. The server reloads the model by itself when "
            f"the worker answers again: restart it there with `edgeopt worker --port {down[0].port}` (same --memory)")


def _http_503(body: dict) -> bytes:
    payload = json.dumps(body).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            + f"Retry-After: {RETRY_AFTER_S}\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload)


async def _answer_503(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: str,
                      down: Sequence[Endpoint]) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
        if target == b"/health":
            body = {"status": "error", "error": message, "workers_down": [str(e) for e in down]}
        else:
            body = {"error": {"message": message, "type": "service_unavailable", "code": "worker_down"}}
        writer.write(_http_503(body))
        await writer.drain()
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


def _answers_hello(endpoint: Endpoint, expected: ProtocolVersion) -> bool:
    """A worker that accepts the connection but does not answer (frozen, or its board unplugged behind a
    switch that still answers) counts as down, as one that refuses it does."""
    try:
        probe_worker(endpoint, expected, timeout_s=2.0)
        return True
    except WorkerError:
        return False


def _all_back(endpoints: Sequence[Endpoint], expected: ProtocolVersion) -> bool:
    try:
        for endpoint in endpoints:
            probe_worker(endpoint, expected, timeout_s=1.0)
        return True
    except WorkerError as exc:
        log.debug("still waiting: %s", exc)
        return False


async def _serve_outage(listening: socket.socket, endpoints: Sequence[Endpoint], down: Sequence[Endpoint],
                        expected: ProtocolVersion) -> None:
    message = outage_message(down)
    # A duplicate of the listening socket: closing the outage server must leave the original listening.
    duplicate = socket.socket(fileno=os.dup(listening.fileno()))
    server = await asyncio.start_server(lambda r, w: _answer_503(r, w, message, down), sock=duplicate)
    loop = asyncio.get_running_loop()
    try:
        while not await loop.run_in_executor(None, _all_back, endpoints, expected):
            await asyncio.sleep(POLL_S)
    finally:
        server.close()
        await server.wait_closed()


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it if the supervisor dies (Linux), so no orphan keeps the port."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(self, child_argv: list[str], host: str, port: int, endpoints: tuple[Endpoint, ...],
                 expected: ProtocolVersion) -> None:
        self.child_argv, self.endpoints, self.expected = child_argv, endpoints, expected
        self.host, self.port = host, port
        self._child: subprocess.Popen | None = None
        self._stopping = False

    def _forward(self, signum: int, _frame: object) -> None:
        self._stopping = True
        if self._child is not None and self._child.poll() is None:
            self._child.send_signal(signum)
        else:
            raise KeyboardInterrupt

    def run(self) -> int:
        probe_workers(self.endpoints, self.expected)  # an unreachable or mismatched worker: an error, now
        listening = socket.create_server((self.host, self.port))
        listening.set_inheritable(True)
        bound_host, bound_port = listening.getsockname()[:2]  # --port 0: the port the system chose
        print(f"edgeopt serve: listening on {bound_host}:{bound_port}; the model is split across "
              f"{', '.join(str(e) for e in self.endpoints)}", file=sys.stderr, flush=True)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._forward)
        # GGML_NO_BACKTRACE: an abort on a lost worker is expected here; a gdb backtrace would only delay it.
        env = {**os.environ, INHERITED_SOCKET_ENV: str(listening.fileno()), "GGML_NO_BACKTRACE": "1"}
        try:
            while True:
                self._child = subprocess.Popen(self.child_argv, pass_fds=(listening.fileno(),), env=env,
                                               preexec_fn=_die_with_parent)
                status = self._child.wait()
                if self._stopping or status == 0:
                    return status
                down = [endpoint for endpoint in self.endpoints if not _answers_hello(endpoint, self.expected)]
                if not down:
                    return status  # the server failed for a reason of its own, and said so
                log.error("edgeopt serve: the head exited (status %s): %s", status, outage_message(down))
                print(f"edgeopt serve: {outage_message(down)}; answering 503 meanwhile", file=sys.stderr, flush=True)
                asyncio.run(_serve_outage(listening, self.endpoints, down, self.expected))
                print("edgeopt serve: every worker answers again; reloading the model", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            return 130
        finally:
            listening.close()


def run_supervised(host: str, port: int, endpoints: tuple[Endpoint, ...]) -> int:
    """Run ``edgeopt serve`` with these same arguments as a supervised child; returns its exit status."""
    from edgeopt.rpc.binaries import head_protocol_version

    child_argv = [sys.executable, "-m", "edgeopt.cli.app", *sys.argv[1:]]
    return Supervisor(child_argv, host, port, endpoints, head_protocol_version()).run()
