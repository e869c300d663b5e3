"""HTTP side of the monitor: one poll = GET /metrics + GET /v1/edgeopt/requests, with short timeouts.

A poll never raises for a server that is down, restarting or answering nonsense: it returns a
:class:`Poll` whose ``error`` says what happened, so the dashboard can show it and try again.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from edgeopt.errors import ConfigError
from edgeopt.monitor.metrics_parse import MetricsSnapshot, RequestRow, parse_metrics, parse_requests

METRICS_PATH = "/metrics"
REQUESTS_PATH = "/v1/edgeopt/requests"


@dataclass(frozen=True)
class Poll:
    """What one poll learned. ``snapshot`` is None exactly when ``error`` is set."""

    snapshot: MetricsSnapshot | None
    requests: list[RequestRow] | None = None  # None: the detail endpoint was unavailable
    error: str | None = None
    requests_error: str | None = None


def normalize_server_url(url: str) -> str:
    """Accept ``host:port``, ``http://host:port`` or a pasted ``.../metrics`` URL; answer the base URL."""
    candidate = url.strip()
    if "://" not in candidate:
        candidate = "http://" + candidate
    parts = urlsplit(candidate)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"cannot monitor {url!r}: not an http(s) server address",
                          "pass the server's base URL, e.g. edgeopt monitor http://127.0.0.1:8000")
    path = parts.path.rstrip("/")
    if path.endswith(METRICS_PATH):
        path = path[: -len(METRICS_PATH)]
    return f"{parts.scheme}://{parts.netloc}{path}"


class MetricsClient:
    """Polls one server. Async so the textual event loop is never blocked by a slow server."""

    def __init__(self, base_url: str, timeout_s: float = 2.0, api_key: str | None = None) -> None:
        self.base_url = normalize_server_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers=headers)
        self._timeout_s = timeout_s

    async def poll(self) -> Poll:
        try:
            response = await self._http.get(METRICS_PATH)
        except httpx.TimeoutException:
            return Poll(None, error=f"no answer within {self._timeout_s:g}s")
        except httpx.HTTPError as exc:
            return Poll(None, error=_describe(exc))
        if response.status_code != 200:
            return Poll(None, error=f"GET {METRICS_PATH} answered HTTP {response.status_code}")
        snapshot = parse_metrics(response.text)
        requests, requests_error = await self._active_requests()
        return Poll(snapshot, requests, requests_error=requests_error)

    async def _active_requests(self) -> tuple[list[RequestRow] | None, str | None]:
        try:
            response = await self._http.get(REQUESTS_PATH)
        except httpx.HTTPError as exc:
            return None, _describe(exc)
        if response.status_code != 200:
            return None, f"HTTP {response.status_code}"
        try:
            payload = response.json()
        except ValueError:
            return None, "not JSON"
        return parse_requests(payload), None

    async def aclose(self) -> None:
        await self._http.aclose()


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused (server down or restarting)"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
