"""OpenAI's Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}; stored responses live in this
face's own store, sized by ``--responses-store`` and reported in /metrics."""

from edgeopt.server.face import Face
from edgeopt.server.responses import routes
from edgeopt.server.responses.store import start_store

FACE = Face("responses", routers={"causal-lm": (routes.router,)}, start=start_store)
