"""Ollama's model names -> the served model's: ``name:tag`` as Ollama's clients write them."""

from __future__ import annotations

from edgeopt.errors import ModelNameError
from edgeopt.server.state import ServerState
from edgeopt.server.text_fields import quoted


def resolve_model(state: ServerState, name: str) -> str:
    """The served model's id for an Ollama name: the id or an alias, with or without a ``:tag``
    (``smollm2``, ``smollm2:latest``, ``smollm2:135m`` all name the one model this server holds)."""
    names = state.settings.model_names
    if name in names:
        return name
    base = name.rsplit(":", 1)[0] if ":" in name else name
    for candidate in names:
        if base in (candidate, candidate.rsplit(":", 1)[0]) or base.lower() == candidate.lower():
            return candidate
    raise ModelNameError(f"model {quoted(name)} not found: this server serves {state.model_id!r}",
                         f"use model={state.model_id!r} (GET /api/tags lists it); models are not pulled here",
                         param="model")
