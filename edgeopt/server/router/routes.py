"""llama-server's router routes, in its shapes: ``GET /models`` lists every model with its state,
``POST /models/load`` and ``POST /models/unload`` (body ``{"model": NAME}``) load and unload one by name.
Unloading a model with requests in flight is a 409: it stays until they finish."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.models.listing import model_rows
from edgeopt.server.state import ServerState
from edgeopt.server.http.text_fields import Text

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)
STATUS = {"loaded": "loaded", "unloaded": "unloaded", "failed": "failed", "too_large": "failed"}


class ModelByName(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: Text


@router.get("/models")
async def list_models(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    data = []
    for row in model_rows(state):
        status: dict[str, object] = {"value": STATUS[row.state]}
        if row.state == "failed":
            status["failed"] = True
            status["error"] = state.models.failures.get(row.name, ("",))[0]
        elif row.state == "too_large":
            status["failed"] = True
            status["error"] = row.entry.refusal
        data.append({"id": row.name, "object": "model", "owned_by": "edgeopt", "created": state.created,
                     "aliases": list(row.entry.aliases), "path": str(row.entry.path or ""), "status": status})
    return JSONResponse({"object": "list", "data": data})


@router.post("/models/load")
async def load_model(body: ModelByName, request: Request) -> JSONResponse:
    """Load it now (making room as a request would); a model whose load failed is tried again at once."""
    state: ServerState = request.app.state.server
    entry = state.models.catalog.resolve(body.model)
    state.models.failures.pop(entry.name, None)
    await state.models.load(entry)
    return JSONResponse({"success": True})


@router.post("/models/unload")
async def unload_model(body: ModelByName, request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    entry = state.models.catalog.resolve(body.model)
    await state.models.unload(entry.name, "POST /models/unload")
    return JSONResponse({"success": True})
