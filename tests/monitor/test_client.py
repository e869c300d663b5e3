"""The poller against a real HTTP server: success, missing detail endpoint, down, slow, bad URLs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from edgeopt.errors import ConfigError
from edgeopt.monitor.client import MetricsClient, normalize_server_url
from edgeopt.server.startup.serve_process import free_port
from tests.monitor.fake_server import FakeServer


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer().start()
    yield server
    server.stop()


async def test_poll_reads_metrics_and_active_requests(fake_server: FakeServer) -> None:
    fake_server.metrics.set(requests_running=1)
    fake_server.active = [{"request_id": "r1", "state": "decoding", "prompt_tokens": 5, "generated_tokens": 2,
                           "elapsed_s": 0.3}]
    client = MetricsClient(fake_server.url)
    try:
        poll = await client.poll()
    finally:
        await client.aclose()
    assert poll.error is None
    assert poll.snapshot.value("edgeopt_requests_running") == 1
    assert [row.request_id for row in poll.requests] == ["r1"]


async def test_a_missing_detail_endpoint_still_gives_metrics(fake_server: FakeServer) -> None:
    fake_server.requests_status = 404
    client = MetricsClient(fake_server.url + "/metrics")  # a pasted /metrics URL works too
    try:
        poll = await client.poll()
    finally:
        await client.aclose()
    assert poll.snapshot is not None
    assert poll.requests is None and "404" in poll.requests_error


async def test_a_server_that_is_down_is_reported_not_raised() -> None:
    client = MetricsClient(f"http://127.0.0.1:{free_port()}")
    try:
        poll = await client.poll()
    finally:
        await client.aclose()
    assert poll.snapshot is None and "connection refused" in poll.error


async def test_a_server_that_never_answers_times_out() -> None:
    # Accepts the TCP connection and then says nothing: the poll must give up after its timeout.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
        client = MetricsClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3)
        try:
            poll = await client.poll()
        finally:
            await client.aclose()
            for conn in accepted:
                conn.close()
    assert poll.snapshot is None and "0.3s" in poll.error


@pytest.mark.parametrize(("given", "expected"), [
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://edge.local:9000/", "http://edge.local:9000"),
    ("https://example.org/edge/metrics", "https://example.org/edge"),
])
def test_normalize_server_url(given: str, expected: str) -> None:
    assert normalize_server_url(given) == expected


@pytest.mark.parametrize("bad", ["ftp://host:21", "http://", "   "])
def test_unusable_urls_are_refused_with_the_value_named(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        normalize_server_url(bad)
    assert repr(bad) in info.value.message and "edgeopt monitor http://" in info.value.hint
