"""Bound what idle and slow clients can hold: a header-read deadline and a cap on open connections.

uvicorn (checked with 0.54, h11 and httptools protocols) has neither. Its ``timeout_keep_alive``
starts only after a response, so a client that connects and never finishes its request headers
(slowloris) keeps its socket forever; ``limit_concurrency`` answers 503 only once a request's headers
have arrived, so such sockets are never refused either. On a small device the file-descriptor limit
(often 1024) is then the next failure.

:func:`guarded_protocol` subclasses uvicorn's HTTP protocol with two rules:

* **header deadline**: from the moment a connection opens, and again after each response, the next
  request's headers must arrive within ``header_timeout_s`` or the connection is closed. Streaming
  responses and slowly read bodies are not affected (the deadline ends once a request has begun).
* **connection cap**: beyond ``max_connections`` open connections a new one gets a bare 503 and is
  closed at once, so a flood costs a descriptor only for that instant.

It relies on two names both uvicorn protocols share: ``cycle`` (the current request, replaced when a
new request's headers are parsed) and ``on_response_complete``.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from edgeopt.errors import ConfigError

log = logging.getLogger("edgeopt.server")
DEFAULT_HEADER_TIMEOUT_S = 10.0  # nginx's client_header_timeout is 60 s; a local API client needs < 1 s
DEFAULT_MAX_CONNECTIONS = 512
_BUSY_BODY = b"too many open connections; retry"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\n"
         b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


def default_max_connections() -> int:
    """DEFAULT_MAX_CONNECTIONS, or half the process's descriptor limit when that is lower: the model files,
    the log and the event loop need descriptors of their own."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS
    return max(1, min(DEFAULT_MAX_CONNECTIONS, soft // 2))


class _ConnectionGuard:
    """Mixin placed before uvicorn's protocol class (see guarded_protocol)."""

    header_timeout_s: float
    max_connections: int
    _refused = False
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        if len(self.connections) >= self.max_connections:
            self._refused = True
            log.warning("refused a connection: %d are open (--max-connections)", len(self.connections))
            transport.write(_BUSY)
            transport.close()
            return
        super().connection_made(transport)  # type: ignore[misc]
        self._start_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return  # uvicorn never saw this connection
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # A pipelined request may already be running; then there is nothing to wait for.
        if self.cycle is None or self.cycle.response_complete:
            self._start_header_deadline()

    def _start_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_deadline_passed, self.cycle)

    def _header_deadline_passed(self, cycle_when_started: Any) -> None:
        self._header_timer = None
        if self.cycle is cycle_when_started and not self.transport.is_closing():  # no new request began
            log.info("closed a connection from %s: no complete request headers within %.0f s", self.client,
                     self.header_timeout_s)
            self.transport.close()


def guarded_protocol(header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                     max_connections: int | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools if installed, else h11) with the deadline and the cap; pass it
    as ``uvicorn.Config(http=...)``."""
    from uvicorn.protocols.http.auto import (
        AutoHTTPProtocol,  # here: the CLI imports this module's defaults
    )

    if not header_timeout_s > 0:
        raise ConfigError(f"--header-timeout {header_timeout_s} must be a positive number of seconds", "e.g. 10")
    cap = default_max_connections() if max_connections is None else max_connections
    if cap < 1:
        raise ConfigError(f"--max-connections {cap} must be at least 1", f"e.g. {DEFAULT_MAX_CONNECTIONS}")
    return type("GuardedHTTPProtocol", (_ConnectionGuard, AutoHTTPProtocol),
                {"header_timeout_s": header_timeout_s, "max_connections": cap})
