"""Operational routes: /health, /metrics, /v1/models, the monitor's /v1/edgeopt/requests, and
DELETE /v1/edgeopt/cache (empty the prefix cache; behind the API key like every /v1 route)."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edgeopt.errors import PermissionDeniedError
from edgeopt.server.callers import caller_of, sees_request_ids
from edgeopt.server.json_body import CheckedJsonRoute
from edgeopt.server.state import ServerState

probes = APIRouter()  # open even with an API key (ApiKeyGuard's open_paths)
api = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@probes.get("/health")
async def health(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    if state.served is not None:
        problem = state.engine_problem()
        if problem is not None:  # loaded, but nothing would ever be generated: not healthy
            return JSONResponse({"status": "error", "error": problem}, status_code=503)
        return JSONResponse({"status": "ok", "model": state.model_id})
    if state.load_error:
        return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503)


@probes.get("/metrics")
async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.server
    payload, content_type = state.metrics.render()
    return Response(payload, media_type=content_type)


@api.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    entry = {"id": state.model_id, "object": "model", "created": state.created, "owned_by": "edgeopt",
             "kind": state.settings.kind}
    if state.served is not None:
        entry["max_model_len"] = state.served.context_length
    return JSONResponse({"object": "list", "data": [entry]})


@api.get("/v1/edgeopt/requests")
async def active_requests(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.server
    engine = state.ready_model().engine
    if engine is None:
        return JSONResponse({"requests": [], "stats": None})
    stats = engine.stats()
    detail = dataclasses.asdict(stats)
    detail["kv_usage_ratio"] = stats.kv_usage_ratio
    rows = [dataclasses.asdict(r) for r in engine.active_requests()]
    if not sees_request_ids(request, state.settings.has_keys):  # an id reads a stored response: the admin's only
        rows = [{k: v for k, v in row.items() if k != "request_id"} for row in rows]
    return JSONResponse({"requests": rows, "stats": detail})


@api.delete("/v1/edgeopt/cache")
async def clear_prefix_cache(request: Request) -> JSONResponse:
    """Evict every cached prefix that no running request uses; answers how many KV cells were freed. With an
    --admin-key, only its holder may (the cache serves every caller)."""
    state: ServerState = request.app.state.server
    caller = caller_of(request)
    if state.settings.admin_key and not (caller is not None and caller.admin):
        raise PermissionDeniedError("emptying the prefix cache is the operator's: this server has an --admin-key",
                                    "send the admin key")
    engine = state.ready_model().engine
    if engine is None:  # embedding models keep no KV
        return JSONResponse({"evicted_tokens": 0, "cached_tokens": 0})
    freed = await asyncio.to_thread(engine.clear_prefix_cache)  # waits for the step in flight
    return JSONResponse({"evicted_tokens": freed, "cached_tokens": engine.stats().kv_cached_tokens})
