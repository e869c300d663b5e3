"""llama-server's router face: ``GET /models``, ``POST /models/load``, ``POST /models/unload`` in its shapes, for
the clients and scripts written against llama-server's router mode (edgeopt.server.models does the work)."""

from __future__ import annotations

from edgeopt.server.face import Face
from edgeopt.server.router import routes

FACE = Face("router", routers={kind: (routes.router,) for kind in ("causal-lm", "embedding", "rerank")})
