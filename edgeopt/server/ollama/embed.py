"""Ollama's /api/embed (and the older /api/embeddings) for embedding bundles, through the same batcher as
/v1/embeddings (edgeopt.server.openai.embeddings). Ollama returns L2-normalised vectors; so does this route."""

from __future__ import annotations

import time

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from edgeopt.errors import RequestError
from edgeopt.server.batching.embedding_batcher import MAX_INPUTS
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.models.keep_alive import request_keep_alive
from edgeopt.server.ollama.schema import OllamaEmbeddingsRequest, OllamaEmbedRequest
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/api/embed")
async def embed(body: OllamaEmbedRequest, request: Request) -> JSONResponse:
    started = time.perf_counter_ns()
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    vectors, tokens = await _embed(request.app.state.server, body.model, body.keep_alive, texts, body.options,
                                   body.dimensions, truncate=body.truncate is not False)
    return JSONResponse({"model": body.model, "embeddings": [v.tolist() for v in vectors],
                         "total_duration": time.perf_counter_ns() - started, "load_duration": 0,
                         "prompt_eval_count": tokens})


@router.post("/api/embeddings")
async def embeddings(body: OllamaEmbeddingsRequest, request: Request) -> JSONResponse:
    [vector], _ = await _embed(request.app.state.server, body.model, body.keep_alive, [body.prompt], body.options,
                               None, truncate=True)
    return JSONResponse({"embedding": vector.tolist()})


async def _embed(state: ServerState, model: str, keep_alive: str | int | float | None, texts: list[str],
                 options: dict | None, dimensions: int | None, truncate: bool) -> tuple[list[np.ndarray], int]:
    if options:
        raise RequestError(f"options {sorted(options)} do not apply to an embedding model", "drop options",
                           param="options")
    served = await state.model(model, "embedding", request_keep_alive(keep_alive))
    runtime = served.require_embedder()
    if dimensions is not None and dimensions != runtime.dimensions:
        raise RequestError(f"dimensions={dimensions} is not supported; this model returns {runtime.dimensions}",
                           "omit dimensions", param="dimensions")
    if not texts or len(texts) > MAX_INPUTS or any(not t for t in texts):
        raise RequestError(f"input must be 1..{MAX_INPUTS} non-empty texts (got {len(texts)})",
                           "send a string or a list of non-empty strings", param="input")
    # truncate (Ollama's default) cuts the text, keeping the special tokens; without it too long is a 400.
    token_ids = await state.prompt_worker.run(lambda: runtime.tokenize(texts, truncate=truncate))
    vectors = await served.embedding_batcher.embed(token_ids)
    normalised = [v / max(float(np.linalg.norm(v)), 1e-12) for v in (np.asarray(v, dtype=np.float32) for v in vectors)]
    return normalised, sum(len(ids) for ids in token_ids)


