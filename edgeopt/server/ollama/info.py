"""Ollama's model-describing routes (/api/tags, /api/show, /api/ps, /api/version) for whatever a server
serves, and clear refusals of the routes that manage models (pull, push, create, copy, delete, blobs): a
server serves the bundles and GGUF files it was started with (or finds in its --models folder), made by
``edgeopt optimize`` or ``edgeopt import``."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from edgeopt import __version__
from edgeopt.errors import NotSupportedHereError
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.models.listing import ModelRow, model_rows
from edgeopt.server.ollama.schema import OllamaShowRequest
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)
# Ollama says when an idle model will be unloaded; a pinned model (a server's one model) stays until it stops.
NEVER_UNLOADED = "9999-12-31T23:59:59Z"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat().replace("+00:00", "Z")


def model_details(card: Mapping[str, Any]) -> dict[str, Any]:
    family = str(card.get("architecture") or "")
    return {"parent_model": "", "format": str(card.get("format") or ""), "family": family,
            "families": [family] if family else None, "parameter_size": _parameter_size(card.get("parameters")),
            "quantization_level": str(card.get("quant") or "")}


def _parameter_size(count: Any) -> str:
    """Ollama's label: "135.0M", "1.5B" ("" when unknown)."""
    if not isinstance(count, int) or count <= 0:
        return ""
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def _entry(state: ServerState, row: ModelRow) -> dict[str, Any]:
    card = row.entry.card
    return {"name": row.name, "model": row.name, "modified_at": _iso(state.created),
            "size": int(card.get("weights_bytes") or 0), "digest": str(card.get("digest") or ""),
            "details": model_details(card)}


@router.get("/api/tags")
async def tags(request: Request) -> JSONResponse:
    """Every servable model (a model too large for the budget is left out: it can never run here)."""
    state: ServerState = request.app.state.server
    return JSONResponse({"models": [_entry(state, row) for row in model_rows(state) if row.state != "too_large"]})


@router.get("/api/ps")
async def running(request: Request) -> JSONResponse:
    """The loaded models: ``size`` is the bytes of the budget each holds (weights, KV, buffers), and
    ``expires_at`` when it unloads if it stays idle."""
    state: ServerState = request.app.state.server
    models = []
    for row in model_rows(state):
        if row.resident is None:
            continue
        left = row.expires_in_s()
        entry = _entry(state, row)
        entry.update({"size": row.resident.bytes or entry["size"], "size_vram": 0,
                      "expires_at": NEVER_UNLOADED if left == math.inf else _iso(time.time() + left),
                      "context_length": row.resident.served.context_length})
        models.append(entry)
    return JSONResponse({"models": models})


@router.post("/api/show")
async def show(body: OllamaShowRequest, request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    entry = state.models.catalog.resolve(body.model_name())
    served = await state.model(entry.name)
    card = entry.card
    arch = str(card.get("architecture") or "")
    info: dict[str, Any] = {"general.architecture": arch, f"{arch}.context_length": served.context_length}
    if isinstance(card.get("parameters"), int):
        info["general.parameter_count"] = card["parameters"]
    template = served.chat_template.source if served.chat_template is not None else ""
    capabilities = ["embedding"] if served.embedder is not None else ["completion", "tools"]
    if served.engine is not None and served.reasoning is not None:
        capabilities.append("thinking")
    return JSONResponse({"modelfile": f"# served by edgeopt {__version__}; no Modelfile\nFROM {entry.name}\n",
                         "parameters": "", "template": template, "details": model_details(card),
                         "model_info": info, "capabilities": capabilities, "modified_at": _iso(state.created)})


@router.get("/api/version")
async def version() -> JSONResponse:
    return JSONResponse({"version": __version__})


def _refuse(action: str) -> None:
    raise NotSupportedHereError(f"{action} models is not supported: this server serves the models it was started "
                                 "with", "make a model with edgeopt optimize (or edgeopt import FILE.gguf) and serve it "
                                 "with edgeopt serve, or put it in the folder of edgeopt serve --models DIR")


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
