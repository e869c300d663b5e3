"""How figures read on screen: fixed widths so columns do not jump, and a dash for "not reported"."""

from __future__ import annotations

MISSING = "–"


def seconds(value: float | None) -> str:
    """Latency in the unit a person reads best: µs, ms or s, always 7 characters wide."""
    if value is None:
        return f"{MISSING:>7}"
    if value < 1e-3:
        return f"{value * 1e6:5.0f}µs"
    if value < 1.0:
        return f"{value * 1e3:5.1f}ms"
    if value < 100.0:
        return f"{value:6.2f}s"
    return f"{value:6.0f}s"


def rate(value: float | None) -> str:
    return f"{MISSING:>7}" if value is None else f"{value:7.1f}"


def count(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.0f}"


def size_bytes(value: float | None) -> str:
    if value is None:
        return MISSING
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def percent(used: float | None, capacity: float | None) -> str:
    if used is None or not capacity:
        return MISSING
    return f"{100.0 * used / capacity:3.0f}%"


def bar(used: float | None, capacity: float | None, width: int) -> str:
    """A text bar ``width`` cells wide; empty (all shade) when the ratio is unknown."""
    width = max(width, 0)
    if used is None or not capacity:
        return "░" * width
    filled = round(width * min(max(used / capacity, 0.0), 1.0))
    return "█" * filled + "░" * (width - filled)
