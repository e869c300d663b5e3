"""Several engines' figures as one: /metrics' unlabelled series (and the monitor) sum every loaded model's.
A counter of a model that unloads leaves the sum: Prometheus reads that as a counter reset."""

from __future__ import annotations

import dataclasses
from collections import Counter

from edgeopt.engine.api import EngineStats


def summed_stats(stats: list[EngineStats]) -> EngineStats | None:
    if not stats:
        return None
    if len(stats) == 1:
        return stats[0]
    totals = {}
    for item in dataclasses.fields(EngineStats):
        values = [getattr(s, item.name) for s in stats]
        if isinstance(values[0], dict):
            merged: Counter[str] = Counter()
            for value in values:
                merged.update(value)
            totals[item.name] = dict(merged)
        else:
            totals[item.name] = sum(values)
    return EngineStats(**totals)
