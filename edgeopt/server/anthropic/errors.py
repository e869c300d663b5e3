"""Anthropic's error shape, ``{"type": "error", "error": {type, message}}``: what its clients parse."""

from __future__ import annotations

from typing import Any

# Anthropic's error types by status (its API's list); any other 5xx is an "api_error"
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
