"""Figures over time from successive scrapes: windowed percentiles, rates and sparkline history.

A Prometheus histogram only ever grows, so "p95 now" is the p95 of the bucket *deltas* between the
newest scrape and one about ``window_s`` seconds older. Rates come from counter deltas between the
last two scrapes. A counter that goes down means the server restarted: the baselines are dropped
rather than reporting negative rates. Pure: the caller passes the clock in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from edgeopt.monitor.metrics_parse import MetricsSnapshot
from edgeopt.monitor.model_figures import BUDGET, ModelFigures, models_in_window

TTFT = "edgeopt_time_to_first_token_seconds"
ITL = "edgeopt_inter_token_latency_seconds"
E2E = "edgeopt_e2e_request_latency_seconds"
GENERATION_TOKENS = "edgeopt_generation_tokens_total"
PROMPT_TOKENS = "edgeopt_prompt_tokens_total"
REQUESTS = "edgeopt_requests_total"
ERRORS = "edgeopt_request_errors_total"
PREEMPTIONS = "edgeopt_preemptions_total"
COUNTERS = (GENERATION_TOKENS, PROMPT_TOKENS, REQUESTS, ERRORS, PREEMPTIONS)


@dataclass(frozen=True)
class Latency:
    """Percentiles over the window; None when nothing was observed in it."""

    p50: float | None = None
    p95: float | None = None
    observations: float = 0.0


@dataclass(frozen=True)
class WorkerFigures:
    """One RPC worker of a split server (edgeopt serve --workers): its memory and a query's round trip."""

    name: str  # host:port
    used_bytes: float | None
    offered_bytes: float | None
    round_trip_s: float | None


@dataclass(frozen=True)
class Figures:
    """Everything the dashboard shows, each None when the server did not report it."""

    ttft: Latency = Latency()
    itl: Latency = Latency()
    e2e: Latency = Latency()
    generation_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_used_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    rss_bytes: float | None = None
    memory_budget_bytes: float | None = None
    requests_total: float | None = None
    errors_total: float | None = None
    preemptions_total: float | None = None
    prefix_cached_tokens: float | None = None  # KV cells the prefix cache keeps
    prefix_hit_tokens_total: float | None = None  # prompt tokens served from it since the server started
    prefix_query_tokens_total: float | None = None  # prompt tokens looked up in it
    speculative_drafted_total: float | None = None  # guessed tokens verified (all drafting sources)
    speculative_accepted_total: float | None = None  # of those, tokens the model agreed with
    kv_cache_kind: str | None = None  # "f16 · streams": the KV cache's element type and layout (info metric)
    workers: tuple[WorkerFigures, ...] = ()  # a split server's RPC workers; empty for one process
    models: tuple[ModelFigures, ...] = ()  # a server of several models: one per model; empty for one model
    models_budget_bytes: float | None = None  # the bytes its loaded models may hold together
    problems: tuple[str, ...] = ()

    @property
    def prefix_hit_ratio(self) -> float | None:
        if self.prefix_hit_tokens_total is None or not self.prefix_query_tokens_total:
            return None
        return self.prefix_hit_tokens_total / self.prefix_query_tokens_total

    @property
    def speculative_acceptance(self) -> float | None:
        if self.speculative_accepted_total is None or not self.speculative_drafted_total:
            return None
        return self.speculative_accepted_total / self.speculative_drafted_total

    @property
    def kv_usage_ratio(self) -> float | None:
        if self.kv_used_tokens is None or not self.kv_capacity_tokens:
            return None
        return self.kv_used_tokens / self.kv_capacity_tokens


class History:
    """Fixed-length series for the sparklines (oldest first); a missing figure is recorded as 0."""

    SERIES = ("tokens_per_s", "ttft_p50", "itl_p50", "e2e_p95", "kv_usage", "rss_bytes")

    def __init__(self, length: int) -> None:
        self._series = {name: deque(maxlen=length) for name in self.SERIES}

    def record(self, figures: Figures) -> None:
        values = {
            "tokens_per_s": figures.generation_tokens_per_s,
            "ttft_p50": figures.ttft.p50,
            "itl_p50": figures.itl.p50,
            "e2e_p95": figures.e2e.p95,
            "kv_usage": figures.kv_usage_ratio,
            "rss_bytes": figures.rss_bytes,
        }
        for name, value in values.items():
            self._series[name].append(value or 0.0)

    def series(self, name: str) -> list[float]:
        return list(self._series[name])

    def clear(self) -> None:
        for values in self._series.values():
            values.clear()


class MetricsWindow:
    """Feed it every scrape with its time; it answers the figures to show."""

    def __init__(self, window_s: float = 10.0, history_length: int = 120) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self.history = History(history_length)
        self._scrapes: deque[tuple[float, MetricsSnapshot]] = deque()

    def reset(self) -> None:
        """Forget baselines and history (the dashboard's 'r' key)."""
        self._scrapes.clear()
        self.history.clear()

    def add(self, snapshot: MetricsSnapshot, now: float) -> Figures:
        if self._scrapes and _restarted(self._scrapes[-1][1], snapshot):
            self._scrapes.clear()
        previous = self._scrapes[-1] if self._scrapes else None
        self._scrapes.append((now, snapshot))
        self._drop_expired(now)
        base_time, base = self._scrapes[0]
        figures = Figures(
            ttft=_latency(snapshot, base, TTFT),
            itl=_latency(snapshot, base, ITL),
            e2e=_latency(snapshot, base, E2E),
            generation_tokens_per_s=_rate(snapshot, previous, now, GENERATION_TOKENS),
            prompt_tokens_per_s=_rate(snapshot, previous, now, PROMPT_TOKENS),
            running=snapshot.value("edgeopt_requests_running"),
            waiting=snapshot.value("edgeopt_requests_waiting"),
            kv_used_tokens=snapshot.value("edgeopt_kv_cache_used_tokens"),
            kv_capacity_tokens=snapshot.value("edgeopt_kv_cache_capacity_tokens"),
            rss_bytes=snapshot.value("edgeopt_process_rss_bytes"),
            memory_budget_bytes=snapshot.value("edgeopt_memory_budget_bytes"),
            requests_total=snapshot.value(REQUESTS),
            errors_total=snapshot.value(ERRORS),
            preemptions_total=snapshot.value(PREEMPTIONS),
            prefix_cached_tokens=snapshot.value("edgeopt_prefix_cache_tokens"),
            prefix_hit_tokens_total=snapshot.value("edgeopt_prefix_cache_hit_tokens_total"),
            prefix_query_tokens_total=snapshot.value("edgeopt_prefix_cache_query_tokens_total"),
            speculative_drafted_total=snapshot.value("edgeopt_speculative_drafted_tokens_total"),
            speculative_accepted_total=snapshot.value("edgeopt_speculative_accepted_tokens_total"),
            kv_cache_kind=_kv_cache_kind(snapshot),
            workers=_workers(snapshot),
            models=models_in_window(self._scrapes),
            models_budget_bytes=snapshot.value(BUDGET),
            problems=snapshot.problems,
        )
        self.history.record(figures)
        return figures

    def _drop_expired(self, now: float) -> None:
        # Keep the newest scrape that is at least window_s old as the base, so the window is full.
        while len(self._scrapes) > 2 and self._scrapes[1][0] <= now - self.window_s:
            self._scrapes.popleft()


def _kv_cache_kind(snapshot: MetricsSnapshot) -> str | None:
    """edgeopt_kv_cache_info's labels as one line: "kv_type=q8_0,layout=streams" -> "q8_0 · streams"."""
    info = snapshot.by_label.get("edgeopt_kv_cache_info")
    if not info:
        return None
    labels = dict(pair.partition("=")[::2] for pair in next(iter(info)).split(","))
    return " · ".join(labels[name] for name in ("kv_type", "layout") if labels.get(name)) or None


def _workers(snapshot: MetricsSnapshot) -> tuple[WorkerFigures, ...]:
    """edgeopt.rpc.metrics' gauges, one per ``worker`` label."""
    used = snapshot.by("worker", "edgeopt_worker_memory_used_bytes")
    offered = snapshot.by("worker", "edgeopt_worker_memory_bytes")
    round_trip = snapshot.by("worker", "edgeopt_worker_round_trip_seconds")
    return tuple(WorkerFigures(name, used.get(name), offered.get(name), round_trip.get(name))
                 for name in sorted(offered.keys() | used.keys()))


def _restarted(earlier: MetricsSnapshot, later: MetricsSnapshot) -> bool:
    for name in COUNTERS:
        before, after = earlier.value(name), later.value(name)
        if before is not None and after is not None and after < before:
            return True
    for name in (TTFT, ITL, E2E):
        before_h, after_h = earlier.histograms.get(name), later.histograms.get(name)
        if before_h is not None and after_h is not None and after_h.minus(before_h) is None:
            return True
    return False


def _latency(snapshot: MetricsSnapshot, base: MetricsSnapshot, name: str) -> Latency:
    if base is snapshot:
        return Latency()  # a single scrape says nothing about *recent* observations yet
    now = snapshot.histograms.get(name)
    if now is None:
        return Latency()
    then = base.histograms.get(name)
    # A histogram absent from the base appeared since then: all its observations are recent.
    delta = now if then is None else now.minus(then)
    if delta is None or delta.count <= 0:
        return Latency()
    return Latency(delta.quantile(0.5), delta.quantile(0.95), delta.count)


def _rate(snapshot: MetricsSnapshot, previous: tuple[float, MetricsSnapshot] | None, now: float,
          name: str) -> float | None:
    current = snapshot.value(name)
    if previous is None or current is None:
        return None
    then, earlier = previous
    before = earlier.value(name)
    if before is None or now <= then:
        return None
    return (current - before) / (now - then)
