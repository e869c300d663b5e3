"""Several engines' figures as one: /metrics' unlabelled series (and the monitor) sum every loaded model's.
A counter of a model that unloads leaves the sum: Prometheus reads that as a counter reset."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from edgeopt.engine.api import EngineStats


def summed_stats(stats: list[EngineStats]) -> EngineStats | None:
    """Every EngineStats field summed over ``stats``: a count or seconds as a number, a count per label (the
    speculative-decoding series) label by label; None for no engine at all."""
    if not stats:
        return None
    if len(stats) == 1:
        return stats[0]
    rows = [dataclasses.asdict(s) for s in stats]
    totals: dict[str, Any] = {}
    for name, first in rows[0].items():
        if isinstance(first, dict):
            merged: Counter[str] = Counter()
            for row in rows:
                merged.update(row[name])
            totals[name] = dict(merged)
        else:
            totals[name] = sum(row[name] for row in rows)
    return EngineStats(**totals)
