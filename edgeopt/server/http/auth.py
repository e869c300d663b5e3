"""API-key protection (``--api-key`` / ``EDGEOPT_API_KEY``) and the refusal to expose a server without one.

The key is checked by a pure ASGI middleware, before any route runs, so an unauthenticated client
learns nothing: a malformed body, an unknown path or /openapi.json all answer 401, not 400 or 404.
Only the probes (/health, /metrics) stay open. The comparison is on the raw header bytes against the
key's UTF-8 bytes (HTTP header values are bytes; decoding them as latin-1, as Starlette does, would
make a non-ASCII key match only when the client sends it latin-1 encoded). Faces whose clients send the key in
another header register it (Anthropic's ``x-api-key``: edgeopt/server/anthropic/__init__.py); a bearer token
and every registered header are accepted on every route.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any

from edgeopt.errors import AuthenticationError, ConfigError
from edgeopt.server.http.callers import Caller, remember_caller
from edgeopt.server.errors import ErrorShapes

log = logging.getLogger("edgeopt.server")


class ApiKeyGuard:
    """401 with ``WWW-Authenticate: Bearer`` for every HTTP request without the key, except to ``open_paths``
    (the probes: liveness checks and metric scrapers carry no key)."""

    def __init__(self, app: Any, keys: Mapping[bytes, Caller], count_error: Callable[[int], None],
                 open_paths: frozenset[str], shapes: ErrorShapes, key_headers: tuple[bytes, ...] = ()) -> None:
        """``keys``: each accepted key and the caller it names (edgeopt.server.http.callers.keyring);
        ``key_headers``: headers (lower case) besides Authorization that may carry the key."""
        self.app = app
        self.open_paths = open_paths
        self.keys = dict(keys)
        self.count_error = count_error
        self.shapes = shapes
        self.key_headers = key_headers
        self.hint = "send the header 'Authorization: Bearer <key>'" + "".join(
            f" (or '{name.decode()}: <key>')" for name in key_headers) + " with the key given to edgeopt serve"

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        token = request_key(scope.get("headers") or [], self.key_headers)
        caller = None if token is None else self._caller(token)
        if caller is not None:
            remember_caller(scope, caller)
            await self.app(scope, receive, send)
            return
        self.count_error(401)
        if token is None:
            error, challenge = AuthenticationError("missing API key", self.hint), 'Bearer realm="edgeopt"'
        else:
            error, challenge = (AuthenticationError("invalid API key", self.hint),
                                'Bearer realm="edgeopt", error="invalid_token"')
        response = self.shapes.request_error(error, scope["path"])
        response.headers["WWW-Authenticate"] = challenge  # RFC 6750 section 3
        await response(scope, receive, send)


    def _caller(self, token: bytes) -> Caller | None:
        """Every key is compared in full (time leaks neither a matched prefix nor which key matched)."""
        found = None
        for key, caller in self.keys.items():
            if hmac.compare_digest(token, key):
                found = caller
        return found


def request_key(headers: list[tuple[bytes, bytes]], key_headers: tuple[bytes, ...] = ()) -> bytes | None:
    """The key a request carries: its bearer token, else the first of ``key_headers`` it sends."""
    token = bearer_token(headers)
    if token is not None:
        return token
    for name, value in headers:
        if name.lower() in key_headers:
            return value.strip() or None
    return None


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The raw bytes after ``Bearer`` in the first Authorization header, or None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            token = token.strip()
            return token if scheme.lower() == b"bearer" and token else None
    return None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname or "": it may resolve to (or bind) a network interface


def check_exposure(host: str, port: int, api_key: str | None, insecure_no_auth: bool) -> None:
    """Refuse to listen beyond this machine without a key, unless the user opted out explicitly. ``api_key``: any
    key the server accepts (--api-key, --api-keys or --admin-key).

    A model on a home network is reachable by every device there (guests' phones, a compromised IoT
    gadget) and its compute is the asset: an open server is found and used by others. One flag is a
    small price for an owner who really wants it open, and the refusal says how to set a key.
    """
    if api_key or is_loopback(host):
        return
    if not insecure_no_auth:
        raise ConfigError(f"--host {host} makes the server reachable from the network, and no API key is set",
                          "set one with EDGEOPT_API_KEY=<key> (or --api-key) and send 'Authorization: Bearer <key>'; "
                          "or pass --insecure-no-auth to serve everyone who can reach "
                          f"{host}:{port}; or bind --host 127.0.0.1")
    log.warning("serving on %s:%d WITHOUT an API key (--insecure-no-auth): anyone who can reach it may use it",
                host, port)
