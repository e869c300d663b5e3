"""Slow and idle clients cannot hold connections: a header deadline and a connection cap (issue 12 item 5).

Raw sockets play the attacker (a slowloris that never finishes its headers, one that trickles a byte
at a time, one that connects and says nothing) against the real uvicorn configuration of
``edgeopt serve`` (launcher.uvicorn_config), while ordinary requests keep being served.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from edgeopt.server.app import create_app
from edgeopt.server.http.connection_guard import guarded_protocol
from edgeopt.server.startup.launcher import ServeOptions
from edgeopt.server.state import ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import MODEL, fake_served_model
from tests.server.live import LiveServer, start_live_server

pytestmark = pytest.mark.timeout(120)
HEADER_TIMEOUT_S = 1.0
PARTIAL_HEADERS = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.fixture
def serve_guarded():
    started: list[LiveServer] = []

    def make(max_connections: int = 64, step_delay_s: float = 0.0) -> LiveServer:
        runtime = FakeRuntime(step_delay_s=step_delay_s)
        app = create_app(ServerSettings(model_names=(MODEL,), memory_budget_bytes=1 << 30),
                         served=fake_served_model(runtime))
        options = ServeOptions(header_timeout_s=HEADER_TIMEOUT_S, max_connections=max_connections)
        live = start_live_server(app, options=options)
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


def connect(live: LiveServer, first_bytes: bytes = b"") -> socket.socket:
    host, port = live.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """True when the server closes the socket (EOF or reset) within ``within_s``; reads any reply first."""
    sock.settimeout(within_s)
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            if sock.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def read_until_closed(sock: socket.socket, within_s: float) -> bytes:
    sock.settimeout(within_s)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def completion(live: LiveServer) -> httpx.Response:
    return httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3}, timeout=30)


def test_slow_and_idle_connections_are_closed_after_the_header_timeout_while_requests_are_served(serve_guarded):
    live = serve_guarded()
    slow = [connect(live, PARTIAL_HEADERS) for _ in range(20)]
    idle = [connect(live) for _ in range(10)]
    # A valid request line, then a header value one byte at a time (httptools refuses a malformed method
    # at once, so the trickle must stay parseable to test the deadline, not the parser).
    trickler = connect(live, PARTIAL_HEADERS + b"X-Pad: ")
    opened = time.monotonic()
    while time.monotonic() - opened < HEADER_TIMEOUT_S * 0.8:  # one byte at a time never resets the deadline
        trickler.sendall(b"a")
        assert completion(live).status_code == 200  # served meanwhile
        time.sleep(0.1)
    for sock in [*slow, *idle, trickler]:
        assert closed_by_server(sock, within_s=HEADER_TIMEOUT_S * 3), "a slow client kept its connection"
        sock.close()
    assert completion(live).status_code == 200
    assert len(live.server.server_state.connections) <= 1  # only httpx's own, if it is still closing


def test_the_deadline_restarts_after_each_response_and_spares_long_responses(serve_guarded):
    live = serve_guarded(step_delay_s=0.05)  # 40 tokens take ~2 s, twice the header timeout
    with httpx.Client(base_url=live.url, timeout=30) as client:
        long = client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 40,
                                                     "stream": True, "ignore_eos": True})
        assert long.status_code == 200 and long.text.rstrip().endswith("data: [DONE]")
        # The same keep-alive connection, reused quickly: its next request is served, not timed out.
        time.sleep(HEADER_TIMEOUT_S * 0.5)
        assert client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}).status_code == 200
    sock = connect(live, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200 OK" in sock.recv(4096)
    sock.sendall(b"GET /health HTTP/1.1\r\n")  # a second request that never finishes its headers
    assert closed_by_server(sock, within_s=HEADER_TIMEOUT_S * 3)
    sock.close()


def test_a_flood_beyond_max_connections_gets_503_and_costs_no_descriptor(serve_guarded):
    live = serve_guarded(max_connections=8)
    held = [connect(live, PARTIAL_HEADERS) for _ in range(8)]
    time.sleep(0.2)  # let the server accept all eight
    flood = [connect(live) for _ in range(30)]
    for sock in flood:
        reply = read_until_closed(sock, within_s=5)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), f"a connection beyond the cap was kept open: {reply!r}"
        assert f"content-length: {len(body)}".encode() in head.lower() and b"retry-after: 1" in head.lower()
        sock.close()
    assert len(live.server.server_state.connections) <= 8
    for sock in held:  # the header deadline frees the slots ...
        assert closed_by_server(sock, within_s=HEADER_TIMEOUT_S * 3)
        sock.close()
    assert completion(live).status_code == 200  # ... and the server takes new clients again


@pytest.mark.parametrize("timeout,cap", [(0.0, 10), (float("nan"), 10), (1.0, 0)])
def test_nonsense_limits_are_refused(timeout, cap):
    from edgeopt.errors import ConfigError

    with pytest.raises(ConfigError, match="--header-timeout|--max-connections"):
        guarded_protocol(timeout, cap)
