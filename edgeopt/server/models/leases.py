"""A request's leases on models last as long as its response: a streamed reply keeps its model loaded
until the last byte is sent or the client goes, then the lease ends (and the model's keep-alive starts).

``ModelLeases`` (ASGI middleware) opens a list per HTTP request in a context variable; ``hold`` adds a
lease to it. A lease taken outside a request (a test calling the state directly) is released at once.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from edgeopt.server.models.residency import Lease

_held: ContextVar[list[Lease] | None] = ContextVar("edgeopt_model_leases", default=None)


def hold(lease: Lease) -> None:
    held = _held.get()
    if held is None:
        lease.release()
    else:
        held.append(lease)


class ModelLeases:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Lease] = []
        token = _held.set(held)
        try:
            await self.app(scope, receive, send)
        finally:
            _held.reset(token)
            for lease in held:
                lease.release()
