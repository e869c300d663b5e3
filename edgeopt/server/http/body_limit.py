"""Refuse request bodies above a size limit before they are buffered (a pure ASGI middleware).

A body is parsed in memory as a whole; without this cap one request could push the process past its
memory budget before any validation ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from edgeopt.server.errors import ErrorShapes


class BodySizeLimit:
    def __init__(self, app: Any, max_bytes: int, count_error: Callable[[int], None], shapes: ErrorShapes) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.count_error = count_error
        self.shapes = shapes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(int(declared), scope, receive, send)
            return
        seen = 0

        async def counting_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # chunked upload without Content-Length
                    raise _TooLarge(seen, self.max_bytes)
            return message

        await self.app(scope, counting_receive, send)

    async def _refuse(self, size: int, scope: dict, receive: Callable, send: Callable) -> None:
        self.count_error(413)
        response = self.shapes.response(scope["path"], 413, f"request body is {size} bytes or more, above the limit "
                                        f"of {self.max_bytes} bytes", "invalid_request_error", code="request_too_large")
        await response(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised while FastAPI reads the body; an HTTPException so it passes through as a 413 response."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(413, f"request body reached {size} bytes, above the limit of {limit} bytes")
