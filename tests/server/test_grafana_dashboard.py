"""The Grafana dashboard shipped in docs/grafana/ queries only what /metrics exports: every metric name in
every panel's PromQL is a sample name a live server's /metrics shows (after it served a request)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.server.conftest import MODEL

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "edgeopt-serve.json"
METRIC_NAME = re.compile(r"\bedgeopt_[a-z0-9_]+")


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


def exported_sample_names(metrics_text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in metrics_text.splitlines() if line and line[0] != "#"}


def test_every_dashboard_query_names_a_metric_the_server_exports(serve_fake):
    live = serve_fake()
    reply = httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": "abc", "max_tokens": 4})
    assert reply.status_code == 200
    refused = httpx.post(f"{live.url}/v1/completions", json={"model": "nope", "prompt": "abc"})
    assert refused.status_code == 404  # a labelled counter has no sample until its first error
    exported = exported_sample_names(httpx.get(f"{live.url}/metrics").text)
    queries = dashboard_queries()
    named = {name for query in queries for name in METRIC_NAME.findall(query)}
    assert len(named) >= 15, f"the dashboard should chart latency, throughput, queue, KV, cache, memory: {named}"
    assert named <= exported, f"queried but not exported: {sorted(named - exported)}"


def test_the_dashboard_covers_what_the_issue_asked_for():
    """TTFT, inter-token latency, tokens/s, queue, KV cache use, prefix-cache hits and RSS each have a query."""
    text = "\n".join(dashboard_queries())
    for metric in ("edgeopt_time_to_first_token_seconds_bucket", "edgeopt_inter_token_latency_seconds_bucket",
                   "edgeopt_generation_tokens_total", "edgeopt_requests_waiting", "edgeopt_kv_cache_usage_ratio",
                   "edgeopt_prefix_cache_hits_total", "edgeopt_process_rss_bytes"):
        assert metric in text, metric
