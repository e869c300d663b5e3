"""A real HTTP server on 127.0.0.1 that serves edgeopt's metric names with values the test controls.

It stands in for ``edgeopt serve`` where a test needs exact numbers or failure modes (garbage text,
a restart, a missing request endpoint). Metrics are produced by prometheus_client's own registry, so
the text is exactly what a real server's exposition looks like.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from edgeopt.server.startup.serve_process import free_port

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class FakeMetrics:
    """The metric names of the server contract, in a private registry."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.ttft = Histogram("edgeopt_time_to_first_token_seconds", "ttft", buckets=BUCKETS, registry=reg)
        self.itl = Histogram("edgeopt_inter_token_latency_seconds", "itl", buckets=BUCKETS, registry=reg)
        self.e2e = Histogram("edgeopt_e2e_request_latency_seconds", "e2e", buckets=BUCKETS, registry=reg)
        self.prompt_tokens = Counter("edgeopt_prompt_tokens", "prompt", registry=reg)
        self.generation_tokens = Counter("edgeopt_generation_tokens", "generated", registry=reg)
        self.preemptions = Counter("edgeopt_preemptions", "preempted", registry=reg)
        self.requests = Counter("edgeopt_requests", "finished", ["finish_reason"], registry=reg)
        self.errors = Counter("edgeopt_request_errors", "errors", ["status"], registry=reg)
        self.prefix_query_tokens = Counter("edgeopt_prefix_cache_query_tokens", "looked up", registry=reg)
        self.prefix_hit_tokens = Counter("edgeopt_prefix_cache_hit_tokens", "reused", registry=reg)
        gauges = ("requests_running", "requests_waiting", "kv_cache_used_tokens", "kv_cache_capacity_tokens",
                  "kv_cache_usage_ratio", "process_rss_bytes", "memory_budget_bytes", "prefix_cache_tokens")
        self.gauges = {name: Gauge(f"edgeopt_{name}", name, registry=reg) for name in gauges}
        self.kv_info = Gauge("edgeopt_kv_cache_info", "kv cache", ["kv_type", "layout"], registry=reg)

    def finish_request(self, prompt: int, generated: int, ttft: float, itl: float, reason: str = "stop") -> None:
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.ttft.observe(ttft)
        for _ in range(generated - 1):
            self.itl.observe(itl)
        self.e2e.observe(ttft + itl * (generated - 1))
        self.requests.labels(finish_reason=reason).inc()

    def reuse_prefix(self, looked_up: int, reused: int) -> None:
        self.prefix_query_tokens.inc(looked_up)
        self.prefix_hit_tokens.inc(reused)

    def kv_cache(self, kv_type: str, layout: str) -> None:
        self.kv_info.labels(kv_type=kv_type, layout=layout).set(1)

    def set(self, **values: float) -> None:
        for name, value in values.items():
            self.gauges[name].set(value)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


class FakeServer:
    """Serves /metrics and /v1/edgeopt/requests from a thread; can be stopped and restarted on its port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.metrics = FakeMetrics()
        self.active: list[dict] = []
        self.metrics_override: str | None = None  # serve this text instead (garbage tests)
        self.requests_status = 200
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_for(self))
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def restart_with_fresh_counters(self) -> None:
        """What a real restart looks like to the monitor: every counter starts again from zero."""
        self.stop()
        self.metrics = FakeMetrics()
        self.start()

    def body_for(self, path: str) -> tuple[int, str, str]:
        if path == "/metrics":
            text = self.metrics_override if self.metrics_override is not None else self.metrics.text()
            return 200, "text/plain; version=0.0.4", text
        if path == "/v1/edgeopt/requests":
            return self.requests_status, "application/json", json.dumps({"requests": self.active, "stats": {}})
        return 404, "text/plain", "not found"


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            status, content_type, body = server.body_for(self.path)
            payload = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass  # keep test output clean

    return Handler
