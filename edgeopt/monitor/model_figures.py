"""Per-model figures of a server of several models (``edgeopt serve A B C``), from its ``model``-labelled series.

The server names every model of its catalog in ``edgeopt_model_loaded``; a model that is not loaded has no
engine, so its running/waiting/tokens series are simply absent. ``edgeopt_model_generation_tokens_total``
counts from the model's last load, so it starts again from zero on every reload: tokens/s over the window
adds up the growth between consecutive scrapes, and a value that fell (or appeared) counts whole, since
all of it was generated after the previous scrape. A single-model server has none of these series and
gets no rows. Pure: the caller passes the scrapes of the window, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from edgeopt.monitor.metrics_parse import Histogram, MetricsSnapshot

LOADED = "edgeopt_model_loaded"
RESIDENT = "edgeopt_model_resident_bytes"
BUDGET = "edgeopt_models_budget_bytes"
MODEL_TTFT = "edgeopt_model_time_to_first_token_seconds"
MODEL_TOKENS = "edgeopt_model_generation_tokens_total"
# Series that name the models of the catalog (the TTFT histogram does not: one model's server labels it too).
NAMING = (LOADED, RESIDENT, "edgeopt_model_loads_total", "edgeopt_model_unloads_total")


@dataclass(frozen=True)
class ModelFigures:
    """One model's row; None where the server did not report the figure (a model not loaded has no queue)."""

    name: str
    loaded: bool
    resident_bytes: float | None = None
    running: float | None = None
    waiting: float | None = None
    ttft_p50: float | None = None  # over the window; None when it answered no first token in it
    generation_tokens_per_s: float | None = None  # over the window; None when it was not loaded in it
    loads: float | None = None
    unloads: float | None = None
    load_failures: float | None = None
    cache_restores: float | None = None


def model_names(snapshot: MetricsSnapshot) -> list[str]:
    """The catalog's models in the server's order (the order of its exposition)."""
    names: dict[str, None] = {}
    for series in NAMING:
        names.update(dict.fromkeys(snapshot.by("model", series)))
    return list(names)


def models_in_window(scrapes: Sequence[tuple[float, MetricsSnapshot]]) -> tuple[ModelFigures, ...]:
    """A row per model of the newest scrape; the window is ``scrapes`` (its first one is the base)."""
    if not scrapes:
        return ()
    now, newest = scrapes[-1]
    names = model_names(newest)
    if not names:
        return ()
    base_time, base = scrapes[0]
    loaded = newest.by("model", LOADED)
    resident = newest.by("model", RESIDENT)
    running = newest.by("model", "edgeopt_model_requests_running")
    waiting = newest.by("model", "edgeopt_model_requests_waiting")
    events = {event: newest.by("model", f"edgeopt_model_{event}_total")
              for event in ("loads", "unloads", "load_failures", "cache_restores")}
    ttft_now, ttft_base = newest.histograms_by("model", MODEL_TTFT), base.histograms_by("model", MODEL_TTFT)
    elapsed = now - base_time
    return tuple(ModelFigures(
        name=name,
        loaded=bool(loaded.get(name)),
        resident_bytes=resident.get(name),
        running=running.get(name),
        waiting=waiting.get(name),
        ttft_p50=_recent_p50(ttft_now.get(name), ttft_base.get(name)) if base is not newest else None,
        generation_tokens_per_s=_tokens_per_s(scrapes, name, elapsed),
        loads=events["loads"].get(name),
        unloads=events["unloads"].get(name),
        load_failures=events["load_failures"].get(name),
        cache_restores=events["cache_restores"].get(name),
    ) for name in names)


def _recent_p50(now: Histogram | None, base: Histogram | None) -> float | None:
    if now is None:
        return None
    # A model absent from the base answered its first request since then: all its observations are recent.
    delta = now if base is None else now.minus(base)
    return None if delta is None else delta.quantile(0.5)


def _tokens_per_s(scrapes: Sequence[tuple[float, MetricsSnapshot]], name: str, elapsed: float) -> float | None:
    if len(scrapes) < 2 or elapsed <= 0:
        return None
    values = [snapshot.by("model", MODEL_TOKENS).get(name) for _, snapshot in scrapes]
    if all(value is None for value in values):
        return None  # never loaded in the window: no rate, rather than a misleading 0
    generated = 0.0
    for before, after in pairwise(values):
        if after is None:
            continue  # unloaded by now: what it made since the previous scrape went with its engine
        generated += after if before is None or after < before else after - before
    return generated / elapsed
