"""Ollama's API under /api/: chat, generate, embed, and the model listings its clients read first; errors in
Ollama's shape, ``{"error": message}``."""

from typing import Any

from edgeopt.server.face import Face
from edgeopt.server.ollama import embed, info, routes


def _error_body(status: int, message: str, error_type: str, param: str | None, code: Any) -> dict[str, Any]:
    return {"error": message}


FACE = Face("ollama", routers={kind: (routes.router, embed.router, info.router) for kind in ("causal-lm", "embedding")},
            error_paths=("/api/",), error_body=_error_body)
