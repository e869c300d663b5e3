"""The head's last act when it loses a worker: every request in flight ends with an error in its own stream.

llama.cpp aborts the process that holds a broken RPC connection (ggml-rpc.cpp: RPC_STATUS_ASSERT ->
GGML_ABORT, on the connection's dispatcher thread), and the HTTP server lives in that process. But
``ggml_abort`` first calls the process's abort callback and only aborts once it returns; meanwhile the
other threads run on (the engine thread waits on the dispatcher, the event loop is free). So the callback
(:meth:`LostWorker.head_lost`) ends every open request with finish_reason "error" and a message naming
the worker, waits (at most ``grace_s``) until each stream has taken that error, so that each client gets
its face's in-band error (an SSE ``error`` event, an NDJSON ``error`` line, a 500 body), then returns, and
llama.cpp aborts. The supervisor (edgeopt.rpc.supervisor) then answers 503 and reloads as before.

The watchdog of a silent worker (edgeopt.rpc.metrics) calls the same method before it aborts the head.
Which worker: the one whose port now refuses a connection (a dead process on a live board); the others
may still be busy with the head's own connection, so a worker that accepts counts as up.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence

from edgeopt.engine import Engine
from edgeopt.engine.api import ServingEngine
from edgeopt.rpc.endpoints import Endpoint, parse_endpoint
from edgeopt.rpc.supervisor import outage_message
from edgeopt.runtimes.llama_cpp.rpc import set_abort_handler

log = logging.getLogger("edgeopt.rpc")
GRACE_S = 2.0  # the longest the head waits for its streams to take their error before it goes
WRITE_MARGIN_S = 0.2  # after the last stream took it: time for the event loop to write the frames out
REFUSE_TIMEOUT_S = 0.3


def refusing(endpoints: Sequence[Endpoint], timeout_s: float = REFUSE_TIMEOUT_S) -> list[Endpoint]:
    """The endpoints whose port refuses (or resets) a TCP connection now; one that accepts, or times out,
    is not counted (it may be busy serving the head, or frozen: the watchdog names that one)."""
    down = []
    for endpoint in endpoints:
        try:
            with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
                pass
        except (ConnectionRefusedError, ConnectionResetError):
            down.append(endpoint)
        except OSError:
            pass
    return down


class LostWorker:
    def __init__(self, endpoints: Sequence[str], engine: Callable[[], ServingEngine | None],
                 grace_s: float = GRACE_S) -> None:
        self.endpoints = tuple(parse_endpoint(endpoint) for endpoint in endpoints)
        self._engine = engine  # None before the model is loaded: nothing is in flight then
        self._grace_s = grace_s
        self._handling = threading.Lock()

    def install(self) -> None:
        """Make ggml's abort (a broken worker connection) run :meth:`head_lost` first."""
        set_abort_handler(lambda message: self.head_lost(f"llama.cpp aborted: {message}"))

    def head_lost(self, cause: str, silent: Sequence[Endpoint] = ()) -> None:
        """End every request in flight with an error naming the lost worker and return once they have it
        (the caller then ends the process). A second caller (another connection breaking meanwhile) never
        returns: its return would abort the process before the first is done."""
        if not self._handling.acquire(blocking=False):
            while True:
                time.sleep(3600)
        down = [*silent, *(e for e in refusing(self.endpoints) if e not in silent)]
        if down:
            message = outage_message(down)
        else:
            names = ", ".join(str(endpoint) for endpoint in self.endpoints)
            message = f"the head lost its connection to a worker ({names}) and stopped; it reloads when they answer"
        log.critical("%s: %s", cause, message)
        engine = self._engine()
        if not isinstance(engine, Engine):  # not loaded yet (--workers serves GGUF: always edgeopt's Engine)
            return
        streams = engine.lose_runtime(message)
        deadline = time.monotonic() + self._grace_s
        while any(not stream.finished for stream in streams) and time.monotonic() < deadline:
            time.sleep(0.01)
        if streams:
            time.sleep(WRITE_MARGIN_S)
