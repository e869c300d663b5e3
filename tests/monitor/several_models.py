"""The /metrics page of a server of several models, written by the server's own collectors.

ServerMetrics (its per-model TTFT histogram) and edgeopt.server.models.metrics.ModelMetrics render the
text, over a stand-in residency whose models, bytes and engine figures the test sets: a renamed series
on the server's side breaks these tests instead of leaving the monitor's panel silently empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from edgeopt.server.metrics import ServerMetrics
from edgeopt.server.models.metrics import ModelCounts, ModelMetrics

MIB = 2**20


@dataclass
class EngineFigures:
    running: int = 0
    waiting: int = 0
    kv_used_tokens: int = 0
    generated_tokens_total: int = 0  # counted from the model's last load


@dataclass
class SeveralModels:
    """A catalog of ``names`` on a ``budget_bytes`` budget; ``load``/``unload`` change what is resident."""

    names: tuple[str, ...]
    budget_bytes: int = 2048 * MIB
    engines: dict[str, EngineFigures] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(lambda: None, memory_budget_bytes=self.budget_bytes)
        self.counts = ModelCounts()
        self.metrics.add_collector(ModelMetrics(self, self.counts))  # type: ignore[arg-type]  (duck-typed residency)

    # What ModelMetrics reads of a Residency.
    @property
    def catalog(self) -> SimpleNamespace:
        return SimpleNamespace(entries=lambda: [SimpleNamespace(name=name) for name in self.names])

    @property
    def loaded(self) -> dict[str, SimpleNamespace]:
        return {name: SimpleNamespace(bytes=size, served=SimpleNamespace(engine=SimpleNamespace(
                    stats=lambda name=name: self.engines[name]))) for name, size in self.held.items()}

    def load(self, name: str, size_bytes: int, restored_cache: bool = False) -> EngineFigures:
        self.held[name] = size_bytes
        self.engines[name] = EngineFigures()  # a fresh engine: its token count starts again
        self.counts.add(name, "loads")
        if restored_cache:
            self.counts.add(name, "cache_restores")
        return self.engines[name]

    def unload(self, name: str) -> None:
        del self.held[name]
        del self.engines[name]
        self.counts.add(name, "unloads")

    def first_token(self, name: str, seconds: float) -> None:
        self.metrics.model_ttft.labels(model=name).observe(seconds)

    def text(self) -> str:
        return self.metrics.render()[0].decode()
