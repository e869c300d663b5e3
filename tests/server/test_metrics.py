"""/metrics exposes the contract names with values that follow the traffic; /v1/edgeopt/requests too."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgeopt.server.metrics import ServerMetrics
from edgeopt.server.state import ServerSettings
from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(120)

CONTRACT = {
    "edgeopt_requests_running": "gauge", "edgeopt_requests_waiting": "gauge",
    "edgeopt_kv_cache_used_tokens": "gauge", "edgeopt_kv_cache_capacity_tokens": "gauge",
    "edgeopt_kv_cache_usage_ratio": "gauge", "edgeopt_time_to_first_token_seconds": "histogram",
    "edgeopt_inter_token_latency_seconds": "histogram", "edgeopt_e2e_request_latency_seconds": "histogram",
    "edgeopt_prompt_tokens": "counter", "edgeopt_generation_tokens": "counter",
    "edgeopt_preemptions": "counter", "edgeopt_requests": "counter", "edgeopt_request_errors": "counter",
    "edgeopt_process_rss_bytes": "gauge", "edgeopt_memory_budget_bytes": "gauge",
}


def scrape(live) -> dict[str, float]:
    """Every sample as {name{labels}: value}."""
    text = httpx.get(f"{live.url}/metrics").text
    samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k != "le")
            key = s.name + (f"{{{labels}}}" if labels else "")
            if "le" not in s.labels:
                samples[key] = s.value
    samples["__families__"] = families  # type: ignore[assignment]
    return samples


def test_metrics_follow_the_traffic(serve_fake):
    live = serve_fake(kv_capacity_tokens=2048)
    before = scrape(live)
    assert {k: before["__families__"].get(k) for k in CONTRACT} == CONTRACT
    assert before["edgeopt_kv_cache_capacity_tokens"] == 2048
    assert before["edgeopt_process_rss_bytes"] > 10 * 2**20
    assert before["edgeopt_memory_budget_bytes"] == 2**30

    prompt_total = 0
    for prompt, n in [("one", 5), ("two two", 7), ("three three three", 3)]:
        r = httpx.post(f"{live.url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": n})
        prompt_total += r.json()["usage"]["prompt_tokens"]
    httpx.post(f"{live.url}/v1/completions", json={"model": "nope", "prompt": "x"})

    after = scrape(live)
    assert after["edgeopt_prompt_tokens_total"] == prompt_total
    assert after["edgeopt_generation_tokens_total"] == 15
    assert after['edgeopt_requests_total{finish_reason="length"}'] == 3
    assert after['edgeopt_request_errors_total{status="404"}'] == 1
    assert after["edgeopt_time_to_first_token_seconds_count"] == 3
    assert after["edgeopt_e2e_request_latency_seconds_count"] == 3
    assert after["edgeopt_inter_token_latency_seconds_count"] == 15 - 3  # first tokens have no gap
    assert after["edgeopt_kv_cache_used_tokens"] == 0 and after["edgeopt_requests_running"] == 0


def test_requests_detail_endpoint_shows_a_running_stream(serve_fake):
    live = serve_fake(step_delay_s=0.02)
    body = {"model": MODEL, "prompt": "abc", "max_tokens": 300, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", f"{live.url}/v1/completions", json=body) as r:
        lines = r.iter_lines()
        for _ in range(4):
            next(lines)
        detail = client.get(f"{live.url}/v1/edgeopt/requests").json()
        mid_stream_metrics = scrape(live)
    [request] = detail["requests"]
    assert request["state"] == "decoding" and request["prompt_tokens"] == 4 and request["generated_tokens"] >= 1
    assert set(request) == {"request_id", "state", "prompt_tokens", "generated_tokens", "elapsed_s", "model"}
    assert detail["stats"]["running"] == 1 and detail["stats"]["kv_used_tokens"] > 0
    assert 0 < detail["stats"]["kv_usage_ratio"] < 1
    assert mid_stream_metrics["edgeopt_requests_running"] == 1
    assert mid_stream_metrics["edgeopt_kv_cache_used_tokens"] > 0


def test_prefix_cache_metrics_and_the_clear_endpoint(serve_fake):
    live = serve_fake(kv_capacity_tokens=2048, max_slots=4, cache_slots=4, api_key="k")
    auth = {"Authorization": "Bearer k"}
    system = "You are a terse assistant. " * 4
    cached = []
    for question in ("first?", "second?"):
        r = httpx.post(f"{live.url}/v1/completions", headers=auth,
                       json={"model": MODEL, "prompt": system + question, "max_tokens": 4, "temperature": 0})
        cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    samples = scrape(live)
    families = samples["__families__"]
    for name in ("edgeopt_prefix_cache_queries", "edgeopt_prefix_cache_hits", "edgeopt_prefix_cache_query_tokens",
                 "edgeopt_prefix_cache_hit_tokens", "edgeopt_prefix_cache_evicted_tokens"):
        assert families[name] == "counter", name
    assert families["edgeopt_prefix_cache_tokens"] == "gauge"
    shared = 1 + len(system)  # BOS + the system prompt (one byte per token)
    assert cached == [0, shared]  # OpenAI's usage.prompt_tokens_details.cached_tokens
    assert samples["edgeopt_prefix_cache_queries_total"] == 2 and samples["edgeopt_prefix_cache_hits_total"] == 1
    assert samples["edgeopt_prefix_cache_hit_tokens_total"] == shared
    assert samples["edgeopt_prefix_cache_query_tokens_total"] == 2 * shared + len("first?") + len("second?")
    cached = samples["edgeopt_prefix_cache_tokens"]
    assert cached == shared + len("first?") + len("second?") + 2 * 3 and samples["edgeopt_kv_cache_used_tokens"] == 0

    assert httpx.delete(f"{live.url}/v1/edgeopt/cache").status_code == 401  # behind the key
    r = httpx.delete(f"{live.url}/v1/edgeopt/cache", headers=auth)
    assert r.json() == {"evicted_tokens": cached, "cached_tokens": 0}
    after = scrape(live)
    assert after["edgeopt_prefix_cache_tokens"] == 0 and live.runtime.kv_cells_total == 0
    assert after["edgeopt_prefix_cache_evicted_tokens_total"] == cached


def test_kv_cache_info_names_the_type_and_layout_the_launcher_chose():
    settings = ServerSettings(model_names=(MODEL,), kv_type="q8_0", kv_layout="streams")
    text = ServerMetrics(lambda: None, 0, settings.kv_labels).render()[0].decode()
    [info] = [f for f in text_string_to_metric_families(text) if f.name == "edgeopt_kv_cache_info"]
    assert [(s.labels, s.value) for s in info.samples] == [({"kv_type": "q8_0", "layout": "streams"}, 1.0)]
    # A runtime with no choice of layout (ONNX, torch) shows none; a server that knows neither, no family.
    assert ServerSettings(model_names=(MODEL,), kv_type="f16").kv_labels == {"kv_type": "f16"}
    bare = ServerMetrics(lambda: None, 0, ServerSettings(model_names=(MODEL,)).kv_labels).render()[0].decode()
    assert "edgeopt_kv_cache_info" not in bare
