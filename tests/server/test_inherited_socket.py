"""A supervised server (``edgeopt serve --workers``: edgeopt.rpc.supervisor binds the port and hands the
socket to the server it runs) serves it as the TCP socket it is. uvicorn's ``Config(fd=...)`` would take it
for a Unix socket, so TCP_NODELAY was never set on its connections and every stream's first token waited in
the kernel for the next write (Nagle's algorithm): 47 -> 24 ms to the first token on a split SmolLM2."""

from __future__ import annotations

import asyncio
import socket
import threading

import httpx
import pytest
import uvicorn

from edgeopt.server.http.connection_guard import guarded_protocol
from edgeopt.server.startup.launcher import INHERITED_SOCKET_ENV, ServeOptions, inherited_sockets, uvicorn_config


async def hello(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def test_the_supervisors_socket_is_served_as_tcp_with_nodelay(monkeypatch: pytest.MonkeyPatch) -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    monkeypatch.setenv(INHERITED_SOCKET_ENV, str(listening.fileno()))
    sockets = inherited_sockets()
    listening.detach()  # the served socket owns the descriptor now (uvicorn closes it at shutdown)
    assert sockets is not None and sockets[0].family == socket.AF_INET

    nodelay: list[int] = []

    class Recording(guarded_protocol()):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            nodelay.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            super().connection_made(transport)

    config = uvicorn_config(hello, ServeOptions(port=port))
    config.http = Recording
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "hello"
    finally:
        server.should_exit = True
        thread.join(10)
    assert nodelay and all(nodelay), f"TCP_NODELAY on the served connections: {nodelay}"


def test_no_inherited_socket_leaves_binding_to_uvicorn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INHERITED_SOCKET_ENV, raising=False)
    assert inherited_sockets() is None
