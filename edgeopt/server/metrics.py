"""Prometheus metrics of one server, in a registry of its own (never the process-global one).

Two kinds of values: what the HTTP layer sees per request (latency histograms, token and request
counters, error counts), recorded as requests flow; and what the engine owns (running/waiting, KV use,
preemptions) plus process RSS, read from ``engine.stats()`` at scrape time by a custom collector, so
they are never stale and the engine thread is never asked to push anything. The KV cache's type and
layout, fixed when the server starts, are an info metric (``edgeopt_kv_cache_info``, value 1).

The metric names are a contract with ``edgeopt monitor``; do not rename them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgeopt.engine.api import EngineStats, RequestOutput

# Latency buckets sized for CPU/edge inference: ITL of a few ms up to seconds-long prefills.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _EngineCollector(Collector):
    def __init__(self, stats: Callable[[], EngineStats | None], memory_budget_bytes: int,
                 kv_labels: dict[str, str]) -> None:
        self._stats = stats
        self._budget = memory_budget_bytes
        self._kv_labels = kv_labels
        self._process = psutil.Process()

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        yield _gauge("edgeopt_requests_running", "Requests being prefilled or decoded.", stats and stats.running)
        yield _gauge("edgeopt_requests_waiting", "Requests queued for a sequence slot.", stats and stats.waiting)
        yield _gauge("edgeopt_kv_cache_used_tokens", "KV cells held by sequences.", stats and stats.kv_used_tokens)
        yield _gauge("edgeopt_kv_cache_capacity_tokens", "KV cells the runtime holds.",
                     stats and stats.kv_capacity_tokens)
        yield _gauge("edgeopt_kv_cache_usage_ratio", "Used / capacity KV cells.", stats and stats.kv_usage_ratio)
        if self._kv_labels:  # an info metric (value 1): what the figures above are counted in
            info = GaugeMetricFamily("edgeopt_kv_cache_info", "The KV cache's element type and layout.",
                                     labels=list(self._kv_labels))
            info.add_metric(list(self._kv_labels.values()), 1.0)
            yield info
        yield _gauge("edgeopt_prefix_cache_tokens", "KV cells the prefix cache keeps for reuse (evicted first).",
                     stats and stats.kv_cached_tokens)
        yield from _prefix_cache_counters(stats)
        preempt = CounterMetricFamily("edgeopt_preemptions", "Sequences preempted to free KV (recomputed later).")
        preempt.add_metric([], float(stats.preemptions_total if stats else 0))
        yield preempt
        yield from _grammar_counters(stats)
        yield from _speculation_counters(stats)
        yield _gauge("edgeopt_process_rss_bytes", "Resident memory of the server process.",
                     self._process.memory_info().rss)
        yield _gauge("edgeopt_memory_budget_bytes", "Memory the server was sized to.", self._budget)


def _prefix_cache_counters(stats: EngineStats | None) -> Iterator[Metric]:
    """Named as vLLM's prefix-cache counters, plus the request-level pair."""
    for name, doc, value in (
        ("edgeopt_prefix_cache_queries", "Requests looked up in the prefix cache.",
         stats and stats.prefix_cache_queries_total),
        ("edgeopt_prefix_cache_hits", "Requests that reused a cached prefix.", stats and stats.prefix_cache_hits_total),
        ("edgeopt_prefix_cache_query_tokens", "Tokens of the requests looked up in the prefix cache.",
         stats and stats.prefix_cache_query_tokens_total),
        ("edgeopt_prefix_cache_hit_tokens", "Tokens served from the prefix cache instead of computed.",
         stats and stats.prefix_cache_hit_tokens_total),
        ("edgeopt_prefix_cache_evicted_tokens", "Cached KV cells evicted (to make room, or when emptied).",
         stats and stats.prefix_cache_evicted_tokens_total),
    ):
        counter = CounterMetricFamily(name, doc)
        counter.add_metric([], float(value or 0))
        yield counter


def _grammar_counters(stats: EngineStats | None) -> Iterator[Metric]:
    """Constrained decoding's cost: masks are computed beside the forward pass; the wait is what it adds."""
    for name, doc, value in [
        ("edgeopt_grammar_steps", "Engine steps with at least one grammar-constrained sequence.",
         stats.grammar_steps_total if stats else 0),
        ("edgeopt_grammar_mask_seconds", "Seconds spent computing grammar token masks (beside the forward pass).",
         stats.grammar_mask_seconds_total if stats else 0.0),
        ("edgeopt_grammar_wait_seconds", "Seconds the engine waited for grammar masks after the forward pass.",
         stats.grammar_wait_seconds_total if stats else 0.0),
        ("edgeopt_grammar_apply_seconds", "Seconds sampling, appending and advancing in steps with grammar masks.",
         stats.grammar_apply_seconds_total if stats else 0.0),
        ("edgeopt_grammar_checked", "Constrained picks drawn without a mask, then checked against the grammar.",
         stats.grammar_checked_total if stats else 0),
        ("edgeopt_grammar_refused", "Of the checked picks, those the grammar refused (drawn again under the mask).",
         stats.grammar_refused_total if stats else 0),
        ("edgeopt_grammar_redo_seconds", "Seconds computing the masks of refused picks (after the forward pass).",
         stats.grammar_redo_seconds_total if stats else 0.0),
    ]:
        family = CounterMetricFamily(name, doc)
        family.add_metric([], float(value))
        yield family


def _speculation_counters(stats: EngineStats | None) -> Iterator[Metric]:
    """Speculative decoding per drafting source: acceptance = accepted / drafted."""
    drafted = CounterMetricFamily("edgeopt_speculative_drafted_tokens", "Drafted tokens sent for verification.",
                                  labels=["source"])
    accepted = CounterMetricFamily("edgeopt_speculative_accepted_tokens",
                                   "Drafted tokens the model agreed with (emitted).", labels=["source"])
    for source, count in (stats.speculative_drafted_total if stats else {}).items():
        drafted.add_metric([source], float(count))
        accepted.add_metric([source], float(stats.speculative_accepted_total.get(source, 0) if stats else 0))
    yield drafted
    yield accepted


class _ShapeCollector:
    """The KV cells the serving shape allocated, by purpose, and the resident memory its plan promises."""

    def __init__(self, live_cells: int, prefix_cells: int, planned_resident_bytes: int) -> None:
        self._live, self._prefix, self._resident = live_cells, prefix_cells, planned_resident_bytes

    def collect(self) -> Iterator[Metric]:
        cells = GaugeMetricFamily("edgeopt_kv_cells", "KV cells allocated, by purpose: live (running sequences) "
                                  "and prefix (kept only for cached prefixes).", labels=["purpose"])
        cells.add_metric(["live"], float(self._live))
        cells.add_metric(["prefix"], float(self._prefix))
        yield cells
        yield _gauge("edgeopt_planned_resident_bytes", "Resident memory edgeopt plan promises for this serving "
                     "shape (weights, KV, runtime buffers, process).", self._resident)


def _gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value or 0))


class ServerMetrics:
    def __init__(self, stats: Callable[[], EngineStats | None], memory_budget_bytes: int = 0,
                 kv_labels: dict[str, str] | None = None) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.ttft = Histogram("edgeopt_time_to_first_token_seconds", "Request arrival to first generated token.",
                              buckets=TTFT_BUCKETS, registry=reg)
        self.itl = Histogram("edgeopt_inter_token_latency_seconds", "Time between generated tokens of a request.",
                             buckets=ITL_BUCKETS, registry=reg)
        self.e2e = Histogram("edgeopt_e2e_request_latency_seconds", "Request arrival to its last token.",
                             buckets=E2E_BUCKETS, registry=reg)
        self.prompt_tokens = Counter("edgeopt_prompt_tokens", "Prompt tokens admitted.", registry=reg)
        self.generation_tokens = Counter("edgeopt_generation_tokens", "Tokens generated.", registry=reg)
        self.requests = Counter("edgeopt_requests", "Finished generation requests.", ["finish_reason"], registry=reg)
        self.model_ttft = Histogram("edgeopt_model_time_to_first_token_seconds", "Request arrival to first generated "
                                    "token, by model (a server of several models).",
                                    ["model"], buckets=TTFT_BUCKETS, registry=reg)
        self.errors = Counter("edgeopt_request_errors", "Requests answered with an error.", ["status"], registry=reg)
        reg.register(_EngineCollector(stats, memory_budget_bytes, kv_labels or {}))

    def add_collector(self, collector: Collector) -> None:
        """Figures a face reads at scrape time (the Responses face's store: edgeopt.server.responses.store)."""
        self.registry.register(collector)

    def describe_shape(self, live_cells: int, prefix_cells: int, planned_resident_bytes: int) -> None:
        """Report the serving shape's KV cells by purpose and its planned resident memory (edgeopt.sizing)."""
        self.registry.register(_ShapeCollector(live_cells, prefix_cells, planned_resident_bytes))

    def count_error(self, status: int) -> None:
        self.errors.labels(status=str(status)).inc()

    def track(self, model: str = "") -> RequestTracker:
        """A request's bookkeeping; ``model`` also labels its time to first token (a server of several models)."""
        return RequestTracker(self, self.model_ttft.labels(model=model) if model else None)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class RequestTracker:
    """Latency bookkeeping of one request; fed every output the engine streams back."""

    def __init__(self, metrics: ServerMetrics, model_ttft: Any = None) -> None:
        self._m = metrics
        self._model_ttft = model_ttft  # this request's model's TTFT histogram (labelled), or None
        self._start = time.perf_counter()
        self._last: float | None = None
        self.finished = False

    def admitted(self, prompt_tokens: int) -> None:
        """The engine accepted the request (a refused one counts only in edgeopt_request_errors_total)."""
        self._m.prompt_tokens.inc(prompt_tokens)

    def on_output(self, out: RequestOutput) -> None:
        now = time.perf_counter()
        produced = len(out.token_ids)
        if produced:
            self._m.generation_tokens.inc(produced)
            if self._last is None:
                self._m.ttft.observe(now - self._start)
                if self._model_ttft is not None:
                    self._model_ttft.observe(now - self._start)
                produced -= 1  # the first token has no predecessor to measure from
            else:
                # Several tokens in one delta (held back for a stop string or UTF-8): spread the gap.
                for _ in range(produced):
                    self._m.itl.observe((now - self._last) / produced)
            self._last = now
        if out.finished:
            self.finish(out.finish_reason or "stop")

    def finish(self, reason: str) -> None:
        if self.finished:
            return
        self.finished = True
        self._m.e2e.observe(time.perf_counter() - self._start)
        self._m.requests.labels(finish_reason=reason).inc()
