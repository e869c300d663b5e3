"""Ollama's model-describing routes (/api/tags, /api/show, /api/ps, /api/version) for whatever a server
serves, and clear refusals of the routes that manage models (pull, push, create, copy, delete, blobs):
one model is served per server, made by ``edgeopt optimize`` or ``edgeopt import``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from edgeopt import __version__
from edgeopt.errors import NotSupportedHereError
from edgeopt.server.json_body import CheckedJsonRoute
from edgeopt.server.ollama.names import resolve_model
from edgeopt.server.ollama.schema import OllamaShowRequest
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)
# Ollama says when an idle model will be unloaded; this server keeps its one model loaded until it stops.
NEVER_UNLOADED = "9999-12-31T23:59:59Z"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


def model_details(state: ServerState) -> dict[str, Any]:
    card = state.settings.model_card
    family = str(card.get("architecture") or "")
    return {"parent_model": "", "format": str(card.get("format") or ""), "family": family,
            "families": [family] if family else None, "parameter_size": _parameter_size(card.get("parameters")),
            "quantization_level": str(card.get("quant") or "")}


def _parameter_size(count: Any) -> str:
    """Ollama's label: "135.0M", "1.5B" ("" when unknown)."""
    if not isinstance(count, int) or count <= 0:
        return ""
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def _entry(state: ServerState) -> dict[str, Any]:
    card = state.settings.model_card
    return {"name": state.model_id, "model": state.model_id, "modified_at": _iso(state.created),
            "size": int(card.get("weights_bytes") or 0), "digest": str(card.get("digest") or ""),
            "details": model_details(state)}


@router.get("/api/tags")
async def tags(request: Request) -> JSONResponse:
    return JSONResponse({"models": [_entry(request.app.state.server)]})


@router.get("/api/ps")
async def running(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    if state.served is None:  # still loading (or failed): nothing is running yet
        return JSONResponse({"models": []})
    entry = _entry(state)
    entry.update({"expires_at": NEVER_UNLOADED, "size_vram": 0, "context_length": state.served.context_length})
    return JSONResponse({"models": [entry]})


@router.post("/api/show")
async def show(body: OllamaShowRequest, request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    resolve_model(state, body.model_name())
    served = state.ready_model()
    card = state.settings.model_card
    arch = str(card.get("architecture") or "")
    info: dict[str, Any] = {"general.architecture": arch, f"{arch}.context_length": served.context_length}
    if isinstance(card.get("parameters"), int):
        info["general.parameter_count"] = card["parameters"]
    template = served.chat_template.source if served.chat_template is not None else ""
    capabilities = ["embedding"] if served.embedder is not None else ["completion", "tools"]
    if served.embedder is None and served.reasoning is not None:
        capabilities.append("thinking")
    return JSONResponse({"modelfile": f"# served by edgeopt {__version__}; no Modelfile\nFROM {state.model_id}\n",
                         "parameters": "", "template": template, "details": model_details(state),
                         "model_info": info, "capabilities": capabilities, "modified_at": _iso(state.created)})


@router.get("/api/version")
async def version() -> JSONResponse:
    return JSONResponse({"version": __version__})


def _refuse(action: str) -> None:
    raise NotSupportedHereError(f"{action} models is not supported: this server serves the one model it was started "
                                 "with", "make a model with edgeopt optimize (or edgeopt import FILE.gguf) and serve it "
                                 "with edgeopt serve")


@router.post("/api/pull")
async def pull() -> None:
    _refuse("pulling")


@router.post("/api/push")
async def push() -> None:
    _refuse("pushing")


@router.post("/api/create")
async def create() -> None:
    _refuse("creating")


@router.post("/api/copy")
async def copy() -> None:
    _refuse("copying")


@router.delete("/api/delete")
async def delete() -> None:
    _refuse("deleting")


@router.head("/api/blobs/{digest}")
async def blob_exists(digest: str) -> None:
    _refuse(f"uploading blobs ({digest}) for")


@router.post("/api/blobs/{digest}")
async def blob_upload(digest: str) -> None:
    _refuse(f"uploading blobs ({digest}) for")
