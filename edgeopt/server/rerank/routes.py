"""POST /v1/rerank (and /rerank, llama-server's; /v2/rerank, Cohere's v2 client's) for rerank bundles.

Every document is scored against the query by the bundle's cross-encoder (pairs longer than the model's
limit are cut as ``CrossEncoder.predict`` cuts them); results come best first, ``top_n`` of them, each with
the document's ``index`` in the request and its ``relevance_score``. Concurrent requests share forward
passes through the model's :class:`~edgeopt.server.batching.rerank_batcher.RerankBatcher`.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from edgeopt.errors import RequestError
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.rerank.schema import RerankRequest
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/v1/rerank")
@router.post("/rerank")
@router.post("/v2/rerank")
async def rerank(body: RerankRequest, request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "rerank")
    runtime = served.require_reranker()
    documents = body.texts()
    if not documents:
        raise RequestError("documents is empty", "send at least one document to rank", param="documents")
    pairs = await state.prompt_worker.run(lambda: runtime.encode_pairs(body.query, documents))  # off the loop
    scores = await served.rerank_batcher.score(pairs)
    tokens = sum(len(pair) for pair in pairs)
    return {"id": f"rerank-{uuid.uuid4().hex}", "object": "list", "model": body.model,
            "results": _results(scores, documents, body.top_n, body.return_documents),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _results(scores: np.ndarray, documents: list[str], top_n: int | None, with_text: bool) -> list[dict[str, Any]]:
    """Best first; equal scores keep the documents' own order (a stable sort)."""
    order = np.argsort(-scores, kind="stable")[:top_n]
    results = []
    for index in order:
        result: dict[str, Any] = {"index": int(index), "relevance_score": float(scores[index])}
        if with_text:
            result["document"] = {"text": documents[index]}
        results.append(result)
    return results
