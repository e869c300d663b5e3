"""How long an idle model stays loaded, written as Ollama's users write it: ``5m``, ``30s``, ``1h``, ``300``
(seconds), ``0`` (unload as soon as its requests finish) or a negative value (never unload)."""

from __future__ import annotations

import math
import re

from edgeopt.errors import ConfigError, RequestError

DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's default, five minutes
FOREVER = math.inf
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_keep_alive(value: str | int | float, where: str = "--keep-alive") -> float:
    """Seconds an idle model stays loaded (math.inf: for ever); a ConfigError naming ``where`` otherwise."""
    seconds = _seconds(value)
    if seconds is None:
        raise ConfigError(f"{where} {value!r} is not a duration", "write e.g. 5m, 30s, 1h, 0 (unload at once) or -1 "
                          "(keep loaded)")
    return seconds


def request_keep_alive(value: str | int | float | None) -> float | None:
    """A request's ``keep_alive`` (Ollama) in seconds; None when the request did not say."""
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is None:
        raise RequestError(f"keep_alive {value!r} is not a duration",
                           'send e.g. "5m", "30s", 0 (unload after this request) or -1 (keep loaded)',
                           param="keep_alive")
    return seconds


def _seconds(value: str | int | float) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number, unit = float(value), None
    else:
        match = _DURATION.match(value)
        if not match:
            return None
        number, unit = float(match.group(1)), match.group(2)
    if math.isnan(number):
        return None
    return FOREVER if number < 0 else number * _UNIT_S[unit]


def describe(seconds: float) -> str:
    return "for ever" if seconds == FOREVER else f"{seconds:g} s"
