"""/metrics of a server of several models, each series labelled with its ``model``: loads, unloads, failed
loads and restored caches (counters), whether it is loaded and the bytes of the budget it holds, and its
engine's running and waiting requests and KV use (read at scrape time)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from edgeopt.server.models.residency import Residency

EVENTS = {"loads": "Times the model was loaded.", "unloads": "Times the model was unloaded (room, keep-alive, asked).",
          "load_failures": "Loads that failed.", "cache_restores": "Loads that restored a saved prefix cache."}


class ModelCounts:
    """Events per model, counted from the residency's threads and the event loop."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, model: str, event: str) -> None:
        with self._lock:
            self._counts[(model, event)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class ModelMetrics:
    def __init__(self, residency: Residency, counts: ModelCounts) -> None:
        self._residency = residency
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        counts = self._counts.snapshot()
        for event, doc in EVENTS.items():
            family = CounterMetricFamily(f"edgeopt_model_{event}", doc, labels=["model"])
            for entry in self._residency.catalog.entries():
                family.add_metric([entry.name], float(counts.get((entry.name, event), 0)))
            yield family
        loaded = dict(self._residency.loaded)
        yield _per_model("edgeopt_model_loaded", "1 while the model is loaded.",
                         {e.name: float(e.name in loaded) for e in self._residency.catalog.entries()})
        yield _per_model("edgeopt_model_resident_bytes", "Bytes of the budget the loaded model holds.",
                         {name: float(r.bytes) for name, r in loaded.items()})
        yield GaugeMetricFamily("edgeopt_models_budget_bytes", "Bytes the loaded models may hold together.",
                                value=float(self._residency.budget_bytes))
        stats = {name: r.served.engine.stats() for name, r in loaded.items() if r.served.engine is not None}
        yield _per_model("edgeopt_model_requests_running", "The model's requests being prefilled or decoded.",
                         {name: float(s.running) for name, s in stats.items()})
        yield _per_model("edgeopt_model_requests_waiting", "The model's requests queued for a sequence slot.",
                         {name: float(s.waiting) for name, s in stats.items()})
        yield _per_model("edgeopt_model_kv_cache_used_tokens", "KV cells the model's sequences hold.",
                         {name: float(s.kv_used_tokens) for name, s in stats.items()})
        yield _per_model("edgeopt_model_generation_tokens", "Tokens the model generated since it was loaded.",
                         {name: float(s.generated_tokens_total) for name, s in stats.items()}, counter=True)


def _per_model(name: str, doc: str, values: dict[str, float], counter: bool = False) -> Metric:
    family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, doc, labels=["model"])
    for model, value in values.items():
        family.add_metric([model], value)
    return family
