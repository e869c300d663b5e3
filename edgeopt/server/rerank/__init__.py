"""Reranking for rerank (cross-encoder) bundles: POST /v1/rerank, /rerank and /v2/rerank in the shape
llama-server, Jina and Cohere share (``query``, ``documents``, ``top_n``, ``return_documents`` ->
``results`` with ``index`` and ``relevance_score``)."""

from edgeopt.server.face import Face
from edgeopt.server.rerank import routes

FACE = Face("rerank", routers={"rerank": (routes.router,)})
