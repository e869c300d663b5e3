"""``create_app``: the FastAPI application around the models it serves.

One model: the app can start before it is loaded (``loader``): /health answers 503 "loading" until the
loader, run in a worker thread, returns a :class:`ServedModel`; requests meanwhile get a 503 body. Several
models (``residency``, edgeopt.server.models): each loads when a request names it, within the budget.
The API faces (edgeopt/server/faces.py) bring their routes for the bundle's ``manifest.kind``, their error
shapes, the headers their clients send the key in and their own state; ``extra_routers`` lets a caller add
more. With an API key every path but /health and /metrics needs it, /openapi.json included
(edgeopt/server/http/auth.py); /docs and /redoc are off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from edgeopt.errors import ConfigError
from edgeopt.server import routes_admin
from edgeopt.server.http.auth import ApiKeyGuard
from edgeopt.server.http.body_limit import BodySizeLimit
from edgeopt.server.http.callers import keyring
from edgeopt.server.errors import ErrorShapes, install_error_handlers
from edgeopt.server.face import Face
from edgeopt.server.faces import FACES
from edgeopt.server.models.catalog import ModelCatalog, ModelEntry, ModelNeed
from edgeopt.server.models.keep_alive import FOREVER
from edgeopt.server.models.leases import ModelLeases
from edgeopt.server.models.residency import Resident, Residency
from edgeopt.server.state import ServedModel, ServerSettings, ServerState

log = logging.getLogger("edgeopt.server")

Loader = Callable[[], ServedModel]


def create_app(settings: ServerSettings, served: ServedModel | None = None, loader: Loader | None = None,
               extra_routers: Sequence[APIRouter] = (),
               on_load_error: Callable[[BaseException], None] | None = None,
               faces: Sequence[Face] = FACES, residency: Residency | None = None) -> FastAPI:
    """Build the app. One model: pass a ready ``served`` model, or a ``loader`` to run in a thread at startup.
    Several: pass their ``residency`` (its pinned models load at startup, the others when asked for)."""
    if sum(x is not None for x in (served, loader, residency)) != 1:
        raise ValueError("create_app needs exactly one of served=, loader= or residency=")
    if residency is None:
        residency = one_model(settings, served, loader)
        routers = kind_routers(settings.kind, faces)
    else:
        routers = kind_routers(None, faces)
    state = ServerState(settings, residency)
    for face in faces:
        if face.start is not None:
            face.start(state)
    app = FastAPI(title="edgeopt", lifespan=_lifespan(state, on_load_error), docs_url=None,
                  redoc_url=None)
    app.state.server = state
    shapes = ErrorShapes(faces)
    install_error_handlers(app, state.metrics.count_error, shapes)
    app.add_middleware(ModelLeases)  # innermost: a lease lasts until the response's last byte
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, count_error=state.metrics.count_error,
                       shapes=shapes)
    if settings.has_keys:  # added last, so it runs first: no body is read before the key is checked
        keys = keyring(settings.api_key, settings.api_keys, settings.admin_key)
        app.add_middleware(ApiKeyGuard, keys=keys, count_error=state.metrics.count_error,
                           open_paths=frozenset(route.path for route in routes_admin.probes.routes), shapes=shapes,
                           key_headers=tuple(name for face in faces for name in face.key_headers))
    app.include_router(routes_admin.probes)
    app.include_router(routes_admin.api)
    for router in [*routers, *extra_routers]:
        app.include_router(router)
    return app


def kind_routers(kind: str | None, faces: Sequence[Face] = FACES) -> list[APIRouter]:
    """Every face's routes for bundles of ``kind`` (None: of every kind, for a server of several models), each
    router once (Ollama's routes serve both kinds)."""
    routers: list[APIRouter] = []
    for router in (router for face in faces for k, rs in face.routers.items() if kind in (None, k) for router in rs):
        if not any(router is seen for seen in routers):
            routers.append(router)
    if not routers:
        servable = sorted({k for face in faces for k in face.routers})
        raise ConfigError(f"bundle kind {kind!r} cannot be served", f"servable kinds: {', '.join(servable)}")
    return routers


def one_model(settings: ServerSettings, served: ServedModel | None, loader: Loader | None) -> Residency:
    """The residency of a server of one model: pinned, loaded at start (``loader``) or already (``served``)."""
    names = settings.model_names
    entry = ModelEntry(name=names[0], aliases=names[1:], kind=settings.kind, need=ModelNeed(0, 0),
                       load=(lambda room: loader()) if loader is not None else None, card=settings.model_card,
                       kv_labels=settings.kv_labels)
    residency = Residency(ModelCatalog([entry]), budget_bytes=0, keep_alive_s=FOREVER, pins=frozenset(names[:1]))
    if served is not None:
        residency.loaded[entry.name] = Resident(entry, served, 0, time.monotonic(), pinned=True)
    return residency


def _lifespan(state: ServerState, on_load_error: Callable[[BaseException], None] | None):  # noqa: ANN202
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        models = state.models
        models.start()
        pinned = [models.catalog.resolve(name) for name in models.pins]
        task = asyncio.create_task(_load_pinned(state, pinned, on_load_error)) if pinned else None
        try:
            yield
        finally:
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)  # a load cannot be interrupted mid-way
            await models.close()

    return lifespan


async def _load_pinned(state: ServerState, entries: list[ModelEntry],
                       on_load_error: Callable[[BaseException], None] | None) -> None:
    """Load the pinned models (a server's one model is pinned); with one model, a failure stops the server."""
    for entry in entries:
        if entry.name in state.models.loaded:
            continue
        try:
            await state.models.load(entry, pinned=True)
            log.info("model %s loaded; serving", entry.name)
        except Exception as exc:  # noqa: BLE001 - any load failure must reach /health and the launcher
            if on_load_error is not None and not state.several_models:
                on_load_error(exc.__cause__ or exc)
