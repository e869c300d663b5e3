"""Loading, overload and client disconnects: the server answers 503/429 with reasons and frees KV."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from edgeopt.server.app import create_app
from edgeopt.server.state import ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import MODEL, fake_served_model
from tests.server.live import start_live_server, wait_healthy

pytestmark = pytest.mark.timeout(120)


def wait_until(condition, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def engine_idle(live) -> bool:
    stats = live.state.engine_stats()
    return stats.running == 0 and stats.waiting == 0 and stats.kv_used_tokens == 0


def test_health_is_503_while_loading_then_200():
    release = threading.Event()
    runtime = FakeRuntime()

    def slow_loader():
        release.wait(30)
        return fake_served_model(runtime)

    app = create_app(ServerSettings(model_names=(MODEL,)), loader=slow_loader)
    live = start_live_server(app, wait_ready=False)
    try:
        health = httpx.get(f"{live.url}/health")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        early = httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert early.status_code == 503 and "loading" in early.json()["error"]["message"]
        release.set()
        wait_healthy(live.url)
        assert httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": "x"}).status_code == 200
    finally:
        release.set()
        live.stop()
    assert runtime.closed, "shutting the server down must close the runtime"


def test_load_failure_is_reported_by_health():
    errors = []

    def failing_loader():
        raise RuntimeError("model file is corrupt")

    app = create_app(ServerSettings(model_names=(MODEL,)), loader=failing_loader, on_load_error=errors.append)
    live = start_live_server(app, wait_ready=False)
    try:
        wait_until(lambda: errors, what="the load error callback")
        health = httpx.get(f"{live.url}/health")
        assert health.status_code == 503 and "corrupt" in health.json()["error"]
    finally:
        live.stop()


def test_streaming_client_disconnect_aborts_and_frees_kv(serve_fake):
    live = serve_fake(step_delay_s=0.02)
    body = {"model": MODEL, "prompt": "long story", "max_tokens": 500, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", f"{live.url}/v1/completions", json=body) as r:
        lines = r.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert all(line.startswith("data: ") or line == "" for line in received)
        assert live.state.engine_stats().running == 1
    # The connection is closed: the sequence must be aborted and its KV released.
    wait_until(lambda: engine_idle(live), what="the aborted stream to free its KV")
    assert live.runtime.kv_used_tokens == 0
    assert 'edgeopt_requests_total{finish_reason="abort"} 1.0' in httpx.get(f"{live.url}/metrics").text


def test_non_streaming_client_disconnect_aborts(serve_fake):
    live = serve_fake(step_delay_s=0.02)
    body = {"model": MODEL, "prompt": "long story", "max_tokens": 500}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{live.url}/v1/completions", json=body, timeout=0.5)
    wait_until(lambda: engine_idle(live), what="the abandoned request to be aborted")
    assert live.runtime.kv_used_tokens == 0


def test_full_queue_answers_429_with_a_reason(serve_fake):
    live = serve_fake(max_slots=1, step_delay_s=0.02, engine={"max_waiting": 1})
    body = {"model": MODEL, "prompt": "x", "max_tokens": 200, "stream": True}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{live.url}/v1/completions", json=body) as running:
            # Keep the line iterator referenced: a discarded httpx iterator closes its connection.
            running_lines = running.iter_lines()
            next(running_lines)
            with client.stream("POST", f"{live.url}/v1/completions", json=body) as waiting:
                wait_until(lambda: live.state.engine_stats().waiting == 1, what="a waiting request")
                refused = client.post(f"{live.url}/v1/completions", json=body)
                assert refused.status_code == 429
                error = refused.json()["error"]
                assert "waiting" in error["message"] and error["type"] == "rate_limit_exceeded"
                assert waiting.status_code == 200
                assert live.state.engine_stats().running == 1, "the first stream must still be running"
    wait_until(lambda: engine_idle(live), what="both streams to end")
    assert 'edgeopt_request_errors_total{status="429"} 1.0' in httpx.get(f"{live.url}/metrics").text


class FlakyRuntime(FakeRuntime):
    """The fake runtime, with a switch that makes every step fail like a crashed backend."""

    fail = False

    def step(self, batch):
        if self.fail:
            raise RuntimeError("simulated backend failure")
        return super().step(batch)


def test_runtime_failure_is_a_500_and_the_server_recovers():
    runtime = FlakyRuntime()
    app = create_app(ServerSettings(model_names=(MODEL,)), served=fake_served_model(runtime))
    live = start_live_server(app)
    try:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 5}
        runtime.fail = True
        failed = httpx.post(f"{live.url}/v1/completions", json=body)
        assert failed.status_code == 500 and "simulated backend failure" in failed.json()["error"]["message"]
        streamed = httpx.post(f"{live.url}/v1/completions", json={**body, "stream": True}).text
        assert "simulated backend failure" in streamed and streamed.endswith("data: [DONE]\n\n")
        runtime.fail = False
        assert httpx.post(f"{live.url}/v1/completions", json=body).status_code == 200
        assert engine_idle(live)
    finally:
        live.stop()
