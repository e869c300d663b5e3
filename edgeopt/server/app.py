"""``create_app``: the FastAPI application around one served model.

The app can start before its model is loaded (``loader``): /health answers 503 "loading" until the
loader, run in a worker thread, returns a :class:`ServedModel`; requests meanwhile get a 503 body.
The API faces (edgeopt/server/faces.py) bring their routes for the bundle's ``manifest.kind``, their error
shapes, the headers their clients send the key in and their own state; ``extra_routers`` lets a caller add
more. With an API key every path but /health and /metrics needs it, /openapi.json included
(edgeopt/server/auth.py); /docs and /redoc are off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from edgeopt.errors import ConfigError
from edgeopt.server import routes_admin
from edgeopt.server.auth import ApiKeyGuard
from edgeopt.server.body_limit import BodySizeLimit
from edgeopt.server.callers import keyring
from edgeopt.server.errors import ErrorShapes, install_error_handlers
from edgeopt.server.face import Face
from edgeopt.server.faces import FACES
from edgeopt.server.state import ServedModel, ServerSettings, ServerState

log = logging.getLogger("edgeopt.server")

Loader = Callable[[], ServedModel]


def create_app(settings: ServerSettings, served: ServedModel | None = None, loader: Loader | None = None,
               extra_routers: Sequence[APIRouter] = (),
               on_load_error: Callable[[BaseException], None] | None = None,
               faces: Sequence[Face] = FACES) -> FastAPI:
    """Build the app. Pass a ready ``served`` model, or a ``loader`` to run in a thread at startup."""
    if (served is None) == (loader is None):
        raise ValueError("create_app needs exactly one of served= or loader=")
    routers = kind_routers(settings.kind, faces)
    state = ServerState(settings)
    state.served = served
    for face in faces:
        if face.start is not None:
            face.start(state)
    app = FastAPI(title="edgeopt", lifespan=_lifespan(state, loader, on_load_error), docs_url=None,
                  redoc_url=None)
    app.state.server = state
    shapes = ErrorShapes(faces)
    install_error_handlers(app, state.metrics.count_error, shapes)
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


def kind_routers(kind: str, faces: Sequence[Face] = FACES) -> list[APIRouter]:
    """Every face's routes for bundles of ``kind``, each router once (Ollama's listings serve both kinds)."""
    routers: list[APIRouter] = []
    for router in (router for face in faces for router in face.routers.get(kind, ())):
        if not any(router is seen for seen in routers):
            routers.append(router)
    if not routers:
        servable = sorted({k for face in faces for k in face.routers})
        raise ConfigError(f"bundle kind {kind!r} cannot be served", f"servable kinds: {', '.join(servable)}")
    return routers


def _lifespan(state: ServerState, loader: Loader | None,
              on_load_error: Callable[[BaseException], None] | None):  # noqa: ANN202 - FastAPI's own type
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_load(state, loader, on_load_error)) if loader else None
        try:
            yield
        finally:
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)  # a load cannot be interrupted mid-way
            if state.served is not None:
                await asyncio.to_thread(state.served.close)

    return lifespan


async def _load(state: ServerState, loader: Loader,
                on_load_error: Callable[[BaseException], None] | None) -> None:
    try:
        state.served = await asyncio.to_thread(loader)
        log.info("model %s loaded; serving", state.model_id)
    except Exception as exc:  # noqa: BLE001 - any load failure must reach /health and the launcher
        state.load_error = str(exc)
        log.error("model failed to load: %s", exc)
        if on_load_error is not None:
            on_load_error(exc)
