"""Ollama's load and unload calls: a chat or generate with nothing to say loads the model (and, with
``keep_alive`` 0, unloads it at once)."""

from __future__ import annotations

from edgeopt.server.models.keep_alive import request_keep_alive
from edgeopt.server.state import ServerState


async def load_or_unload(state: ServerState, name: str, use: str, keep_alive: str | int | float | None) -> str:
    """Load ``name`` and hold it for ``keep_alive``; Ollama's done_reason: "unload" when that is 0, else "load"."""
    seconds = request_keep_alive(keep_alive)
    await state.model(name, use, seconds)
    return "unload" if seconds == 0 else "load"
