"""Summaries of latency samples: percentiles without numpy's interpolation surprises."""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (50, 90, 99)


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (the value a reader can find in the raw samples); NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """mean and p50/p90/p99 of seconds, reported in milliseconds."""
    if not samples:
        return {"count": 0}
    out: dict[str, float] = {"count": len(samples), "mean_ms": 1000 * sum(samples) / len(samples)}
    for pct in PERCENTILES:
        out[f"p{pct}_ms"] = 1000 * percentile(samples, pct)
    return out
