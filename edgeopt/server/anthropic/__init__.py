"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens, in Anthropic's error shape; its
clients send the key as ``x-api-key`` (Claude Code with ANTHROPIC_API_KEY) or as a bearer token."""

from typing import Any

from edgeopt.server.anthropic import routes
from edgeopt.server.anthropic.errors import anthropic_error_body
from edgeopt.server.face import Face


def _error_body(status: int, message: str, error_type: str, param: str | None, code: Any) -> dict[str, Any]:
    return anthropic_error_body(status, message)


FACE = Face("anthropic", routers={"causal-lm": (routes.router,)}, error_paths=("/v1/messages",),
            error_body=_error_body, key_headers=(b"x-api-key",))
