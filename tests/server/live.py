"""Run a real uvicorn server in a background thread for tests (real sockets, real disconnects)."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from edgeopt.server.startup.serve_process import free_port
from edgeopt.server.startup.launcher import ServeOptions, uvicorn_config


@dataclass
class LiveServer:
    app: FastAPI
    url: str
    server: uvicorn.Server
    thread: threading.Thread
    runtime: Any = None  # the runtime behind the app, for tests that inspect it

    @property
    def state(self) -> Any:
        return self.app.state.server

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "uvicorn did not stop within 30 s"


def start_live_server(app: FastAPI, wait_ready: bool = True, timeout_s: float = 30.0,
                      options: ServeOptions | None = None) -> LiveServer:
    """Serve ``app`` with the uvicorn configuration ``edgeopt serve`` uses (``options``: its connection limits)."""
    port = free_port()
    options = dataclasses.replace(options or ServeOptions(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(uvicorn_config(app, options))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    live = LiveServer(app, f"http://127.0.0.1:{port}", server, thread)
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"test server on port {port} did not start")
        time.sleep(0.02)
    if wait_ready:
        wait_healthy(live.url, timeout_s)
    return live


def wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/health").status_code == 200:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url}/health never returned 200")
