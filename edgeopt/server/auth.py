"""Bearer-token check for the /v1 routes (``--api-key``); /health and /metrics stay open for probes."""

from __future__ import annotations

import hmac

from fastapi import Request

from edgeopt.errors import AuthenticationError


def require_api_key(request: Request) -> None:
    """FastAPI dependency: 401 unless ``Authorization: Bearer <key>`` matches the configured key."""
    expected = request.app.state.server.settings.api_key
    if not expected:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("missing API key: send the header 'Authorization: Bearer <key>'",
                                  "use the key given to edgeopt serve --api-key")
    # compare_digest: the time taken must not reveal how many leading characters matched.
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise AuthenticationError("invalid API key", "use the key given to edgeopt serve --api-key")
