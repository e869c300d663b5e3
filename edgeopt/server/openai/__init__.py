"""OpenAI's API: /v1/chat/completions, /v1/completions, /v1/embeddings (routes, wire schema, translation in,
chunks and bodies out). Its error shape is the server's default (edgeopt/server/errors.py)."""

from edgeopt.server.face import Face
from edgeopt.server.openai import embeddings, routes

FACE = Face("openai", routers={"causal-lm": (routes.router,), "embedding": (embeddings.router,)})
