"""``create_app``: the FastAPI application around one served model.

The app can start before its model is loaded (``loader``): /health answers 503 "loading" until the
loader, run in a worker thread, returns a :class:`ServedModel`; requests meanwhile get a 503 body.
Routers are chosen by the bundle's ``manifest.kind``: a kind names modules exposing ``router``, so a
new kind (e.g. "embedding": edgeopt/server/embeddings.py) plugs in without touching this file's
logic, and ``extra_routers`` lets a caller add more. With an API key every path but /health and
/metrics needs it, /openapi.json included (edgeopt/server/auth.py); /docs and /redoc are off.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from edgeopt.errors import ConfigError
from edgeopt.server import routes_admin
from edgeopt.server.auth import ApiKeyGuard
from edgeopt.server.body_limit import BodySizeLimit
from edgeopt.server.errors import install_error_handlers
from edgeopt.server.state import ServedModel, ServerSettings, ServerState

log = logging.getLogger("edgeopt.server")

KIND_ROUTERS: dict[str, tuple[str, ...]] = {
    "causal-lm": ("edgeopt.server.routes_openai", "edgeopt.server.routes_responses", "edgeopt.server.routes_messages",
                  "edgeopt.server.routes_ollama", "edgeopt.server.routes_ollama_info", "edgeopt.server.routes_tokenize"),
    "embedding": ("edgeopt.server.embeddings", "edgeopt.server.routes_ollama_embed", "edgeopt.server.routes_ollama_info"),
}

Loader = Callable[[], ServedModel]


def create_app(settings: ServerSettings, served: ServedModel | None = None, loader: Loader | None = None,
               extra_routers: Sequence[APIRouter] = (),
               on_load_error: Callable[[BaseException], None] | None = None) -> FastAPI:
    """Build the app. Pass a ready ``served`` model, or a ``loader`` to run in a thread at startup."""
    if (served is None) == (loader is None):
        raise ValueError("create_app needs exactly one of served= or loader=")
    state = ServerState(settings)
    state.served = served
    app = FastAPI(title="edgeopt", lifespan=_lifespan(state, loader, on_load_error), docs_url=None,
                  redoc_url=None)
    app.state.server = state
    install_error_handlers(app, state.metrics.count_error)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, count_error=state.metrics.count_error)
    if settings.api_key:  # added last, so it runs first: no body is read before the key is checked
        app.add_middleware(ApiKeyGuard, api_key=settings.api_key, count_error=state.metrics.count_error,
                           open_paths=frozenset(route.path for route in routes_admin.probes.routes))
    app.include_router(routes_admin.probes)
    app.include_router(routes_admin.api)
    for router in [*kind_routers(settings.kind), *extra_routers]:
        app.include_router(router)
    return app


def kind_routers(kind: str) -> list[APIRouter]:
    if kind not in KIND_ROUTERS:
        raise ConfigError(f"bundle kind {kind!r} cannot be served", f"servable kinds: {', '.join(KIND_ROUTERS)}")
    routers = []
    for module_name in KIND_ROUTERS[kind]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ConfigError(f"bundle kind {kind!r} needs {module_name}, which this edgeopt does not have",
                              "upgrade edgeopt") from exc
        routers.append(module.router)
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
