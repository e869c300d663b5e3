"""Operational routes: /health, /metrics, /v1/models, the monitor's /v1/edgeopt/requests, and
DELETE /v1/edgeopt/cache (empty the prefix cache; behind the API key like every /v1 route)."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edgeopt.errors import PermissionDeniedError
from edgeopt.server.http.callers import caller_of, sees_request_ids
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.models.listing import model_rows
from edgeopt.server.state import ServerState, engine_problem

probes = APIRouter()  # open even with an API key (ApiKeyGuard's open_paths)
api = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@probes.get("/health")
async def health(request: Request) -> JSONResponse:
    """One model: 200 once it is loaded and can generate, 503 while it loads or when it failed. Several: 200
    while the server answers, with each model's state (a model that failed is that model's 503, not the
    server's)."""
    state: ServerState = request.app.state.server
    if state.several_models:
        return JSONResponse({"status": "ok", "models": {row.name: row.state for row in model_rows(state)}})
    models = state.models
    resident = models.loaded.get(state.model_id)
    if resident is not None:
        problem = engine_problem(resident.served)
        if problem is not None:  # loaded, but nothing would ever be generated: not healthy
            return JSONResponse({"status": "error", "error": problem}, status_code=503)
        return JSONResponse({"status": "ok", "model": state.model_id})
    failure = models.failures.get(state.model_id)
    if failure is not None:
        return JSONResponse({"status": "error", "error": failure[0]}, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503)


@probes.get("/metrics")
async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.server
    payload, content_type = state.metrics.render()
    return Response(payload, media_type=content_type)


@api.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    """Every servable model, loaded or not (``status``: loaded, unloaded, failed, too_large)."""
    state: ServerState = request.app.state.server
    data = []
    for row in model_rows(state):
        entry = {"id": row.name, "object": "model", "created": state.created, "owned_by": "edgeopt",
                 "kind": row.entry.kind, "status": row.state}
        if row.resident is not None:
            entry["max_model_len"] = row.resident.served.context_length
        data.append(entry)
    return JSONResponse({"object": "list", "data": data})


@api.get("/v1/edgeopt/requests")
async def active_requests(request: Request) -> JSONResponse:
    """The monitor's table: every loaded model's requests (each row names its model) and their summed figures."""
    state: ServerState = request.app.state.server
    rows = []
    for name, resident in list(state.models.loaded.items()):
        engine = resident.served.engine
        if engine is not None:
            rows += [dataclasses.asdict(r) | {"model": name} for r in engine.active_requests()]
    stats = state.engine_stats()
    if stats is None:
        return JSONResponse({"requests": [], "stats": None})
    detail = dataclasses.asdict(stats)
    detail["kv_usage_ratio"] = stats.kv_usage_ratio
    if not sees_request_ids(request, state.settings.has_keys):  # an id reads a stored response: the admin's only
        rows = [{k: v for k, v in row.items() if k != "request_id"} for row in rows]
    return JSONResponse({"requests": rows, "stats": detail})


@api.delete("/v1/edgeopt/cache")
async def clear_prefix_cache(request: Request) -> JSONResponse:
    """Evict every cached prefix that no running request uses, in every loaded model; answers how many KV cells
    were freed. With an --admin-key, only its holder may (the cache serves every caller)."""
    state: ServerState = request.app.state.server
    caller = caller_of(request)
    if state.settings.admin_key and not (caller is not None and caller.admin):
        raise PermissionDeniedError("emptying the prefix cache is the operator's: this server has an --admin-key",
                                    "send the admin key")
    freed, cached = 0, 0
    for resident in list(state.models.loaded.values()):
        engine = resident.served.engine
        if engine is not None:  # embedding models keep no KV
            freed += await asyncio.to_thread(engine.clear_prefix_cache)  # waits for the step in flight
            cached += engine.stats().kv_cached_tokens
    return JSONResponse({"evicted_tokens": freed, "cached_tokens": cached})
