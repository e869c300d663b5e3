"""Drafted and accepted token counts per drafting source, for /metrics and the monitor."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class SpeculationCounters:
    drafted: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # tokens sent for verification
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # of those, tokens emitted
    steps: int = 0  # steps that verified at least one drafted token

    def record(self, source: str, drafted: int, accepted: int) -> None:
        self.drafted[source] += drafted
        self.accepted[source] += accepted

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """source -> (drafted, accepted), a copy safe to read from another thread."""
        return {source: (self.drafted[source], self.accepted.get(source, 0)) for source in list(self.drafted)}
