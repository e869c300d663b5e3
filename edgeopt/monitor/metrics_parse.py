"""Turn a server's Prometheus text and its per-request JSON into plain values the dashboard can use.

Pure functions and frozen dataclasses: no I/O, no clock. Parsing is tolerant by design: a server
that is mid-restart, a proxy that injects garbage, or a metric family the monitor does not know must
never crash the dashboard. A family that fails to parse is dropped and named in ``problems``; the
rest of the page is still used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Sample-name suffixes the text format gives the parts of a histogram.
_BUCKET, _COUNT, _SUM = "_bucket", "_count", "_sum"


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound (ascending, last one +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    def minus(self, earlier: Histogram) -> Histogram | None:
        """Observations made since ``earlier``; None when the two are not comparable (a reset)."""
        if earlier.bounds != self.bounds or earlier.count > self.count:
            return None
        deltas = tuple(now - then for now, then in zip(self.cumulative, earlier.cumulative))
        if any(d < 0 for d in deltas):
            return None
        return Histogram(self.bounds, deltas, self.count - earlier.count, self.total - earlier.total)

    def quantile(self, q: float) -> float | None:
        """Estimate the q-quantile the way Prometheus' histogram_quantile does (linear within a bucket).

        None when there are no observations. An answer in the +Inf bucket is clamped to the highest
        finite bound, because nothing better is known about it.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        if self.count <= 0 or not self.cumulative or self.cumulative[-1] <= 0:
            return None
        rank = q * self.cumulative[-1]
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative):
            if cumulative >= rank and cumulative > lower_count:
                if math.isinf(bound):
                    return lower_bound
                share = (rank - lower_count) / (cumulative - lower_count)
                return lower_bound + (bound - lower_bound) * share
            lower_bound, lower_count = bound, cumulative
        return lower_bound

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape. Scalars are keyed by sample name (counters keep their ``_total``), summed over labels."""

    scalars: dict[str, float] = field(default_factory=dict)
    by_label: dict[str, dict[str, float]] = field(default_factory=dict)  # sample -> "k=v,..." -> value
    histograms: dict[str, Histogram] = field(default_factory=dict)  # summed over labels other than le
    labelled_histograms: dict[str, dict[str, Histogram]] = field(default_factory=dict)  # name -> "k=v,..." -> one
    problems: tuple[str, ...] = ()

    def value(self, name: str) -> float | None:
        return self.scalars.get(name)

    def by(self, label: str, name: str) -> dict[str, float]:
        """A series that carries one label (``model``, ``worker``) as {label value: sample value}."""
        return {_label_value(key, label): value for key, value in self.by_label.get(name, {}).items()}

    def histograms_by(self, label: str, name: str) -> dict[str, Histogram]:
        return {_label_value(key, label): hist for key, hist in self.labelled_histograms.get(name, {}).items()}


def _label_value(key: str, label: str) -> str:
    # A key of one label is "model=NAME": everything after the first "=" is the name, commas included.
    return key.partition(f"{label}=")[2]


@dataclass(frozen=True)
class RequestRow:
    """One line of the active-requests table."""

    request_id: str
    state: str
    prompt_tokens: int
    generated_tokens: int
    elapsed_s: float
    model: str | None = None  # a server of several models names each request's model


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a /metrics page; malformed families are skipped and reported, never raised."""
    scalars: dict[str, float] = {}
    by_label: dict[str, dict[str, float]] = {}
    histograms: dict[str, Histogram] = {}
    labelled_histograms: dict[str, dict[str, Histogram]] = {}
    problems: list[str] = []
    for name, chunk in _family_chunks(text):
        try:
            families = list(text_string_to_metric_families(chunk))
        except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad lines
            problems.append(f"{name or 'metrics'}: {exc}")
            continue
        for family in families:
            if family.type == "histogram":
                if not family.samples:
                    continue  # a labelled histogram before its first observation: nothing to show, nothing wrong
                histogram = _histogram_from_samples(family.samples)
                if histogram is None:
                    problems.append(f"{family.name}: histogram without usable buckets")
                    continue
                histograms[family.name] = histogram
                labelled = _labelled_histograms(family.samples)
                if labelled:
                    labelled_histograms[family.name] = labelled
                continue
            if family.type == "counter" and not family.samples:
                # A labelled counter has no samples until its first increment: that is a zero.
                scalars.setdefault(family.name + "_total", 0.0)
            _add_scalars(family.samples, scalars, by_label)
    return MetricsSnapshot(scalars, by_label, histograms, labelled_histograms, tuple(problems))


def _family_chunks(text: str) -> list[tuple[str, str]]:
    """Split exposition text into per-family pieces so one bad family cannot spoil the others.

    A piece starts at a ``# HELP``/``# TYPE`` line naming a family other than the current one, or at
    a bare sample line whose name shares no prefix with the current family.
    """
    chunks: list[tuple[str, list[str]]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        name = _line_family(stripped)
        is_metadata = stripped.startswith("#")
        sample_of_other = not is_metadata and name != current and not name.startswith(current + "_")
        if not chunks or (name and name != current and (is_metadata or sample_of_other)):
            current = name
            chunks.append((current, []))
        chunks[-1][1].append(stripped)
    return [(name, "\n".join(lines) + "\n") for name, lines in chunks]


def _line_family(line: str) -> str:
    if line.startswith("#"):
        parts = line.split()
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else ""
    return line.split("{", 1)[0].split(" ", 1)[0]


def _add_scalars(samples: list[Any], scalars: dict[str, float], by_label: dict[str, dict[str, float]]) -> None:
    for sample in samples:
        if sample.name.endswith("_created") or not math.isfinite(sample.value):
            continue  # creation timestamps are not figures; NaN/Inf would poison sums
        scalars[sample.name] = scalars.get(sample.name, 0.0) + sample.value
        if sample.labels:
            key = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            by_label.setdefault(sample.name, {})[key] = sample.value


def _labelled_histograms(samples: list[Any]) -> dict[str, Histogram]:
    """One histogram per label set other than ``le`` (edgeopt_model_time_to_first_token_seconds{model=...})."""
    groups: dict[str, list[Any]] = {}
    for sample in samples:
        labels = sorted((k, v) for k, v in sample.labels.items() if k != "le")
        if labels:
            groups.setdefault(",".join(f"{k}={v}" for k, v in labels), []).append(sample)
    histograms = {key: _histogram_from_samples(group) for key, group in groups.items()}
    return {key: hist for key, hist in histograms.items() if hist is not None}


def _histogram_from_samples(samples: list[Any]) -> Histogram | None:
    buckets: dict[float, float] = {}
    count = total = None
    for sample in samples:
        if sample.name.endswith(_BUCKET):
            try:
                bound = float(sample.labels["le"])
            except (KeyError, ValueError):
                return None
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
        elif sample.name.endswith(_COUNT):
            count = (count or 0.0) + sample.value
        elif sample.name.endswith(_SUM):
            total = (total or 0.0) + sample.value
    if not buckets:
        return None
    bounds = tuple(sorted(buckets))
    cumulative = tuple(buckets[b] for b in bounds)
    if any(later < earlier for earlier, later in zip(cumulative, cumulative[1:])):
        return None  # cumulative counts must not decrease with the bound
    if count is None:
        count = cumulative[-1]
    return Histogram(bounds, cumulative, count, total if total is not None else 0.0)


def parse_requests(payload: Any) -> list[RequestRow]:
    """Rows of GET /v1/edgeopt/requests; rows with missing or mistyped fields are skipped."""
    if not isinstance(payload, dict) or not isinstance(payload.get("requests"), list):
        return []
    rows: list[RequestRow] = []
    for item in payload["requests"]:
        row = _request_row(item)
        if row is not None:
            rows.append(row)
    return rows


def _request_row(item: Any) -> RequestRow | None:
    if not isinstance(item, dict):
        return None
    try:
        return RequestRow(
            # a server with keys shows ids only to its --admin-key (edgeopt.server.http.callers)
            request_id=str(item.get("request_id", "(hidden)")),
            state=str(item.get("state", "?")),
            prompt_tokens=int(item.get("prompt_tokens", 0)),
            generated_tokens=int(item.get("generated_tokens", 0)),
            elapsed_s=float(item.get("elapsed_s", 0.0)),
            model=str(item["model"]) if item.get("model") is not None else None,
        )
    except (KeyError, TypeError, ValueError):
        return None
