"""POST /v1/embeddings for embedding bundles (OpenAI-compatible); concurrent requests share forward
passes through the model's :class:`~edgeopt.server.batching.embedding_batcher.EmbeddingBatcher`."""

from __future__ import annotations

import base64
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from edgeopt.errors import RequestError
from edgeopt.runtimes.base import EmbeddingRuntime
from edgeopt.server.batching.embedding_batcher import MAX_INPUTS
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.state import ServerState
from edgeopt.server.http.text_fields import Text

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: Text
    input: Text | list[Text] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: Text | None = None


def _token_inputs(body: EmbeddingRequest, runtime: EmbeddingRuntime) -> list[list[int]]:
    raw = body.input
    if isinstance(raw, str):
        raw = [raw]
    if not raw:
        raise RequestError("input is empty", "send a string or a non-empty list of strings", param="input")
    if len(raw) > MAX_INPUTS:
        raise RequestError(f"input has {len(raw)} items, more than {MAX_INPUTS}", "split the request", param="input")
    if all(isinstance(x, int) for x in raw):
        raw = [raw]  # one pre-tokenized input
    if all(isinstance(x, str) for x in raw):
        if any(not x for x in raw):
            raise RequestError("input contains an empty string", "remove empty strings", param="input")
        return runtime.tokenize(list(raw))
    vocab = runtime.info.vocab_size
    for i, ids in enumerate(raw):
        bad = [t for t in ids if not 0 <= t < vocab]
        if not ids or bad:
            raise RequestError(f"input {i} has token ids {bad[:5] or '[] (empty)'} outside 0..{vocab - 1}",
                               "send valid token ids or text", param="input")
        if len(ids) > runtime.info.context_length:
            raise RequestError(f"input {i} has {len(ids)} tokens, more than the model's {runtime.info.context_length}",
                               "shorten or split the input", param="input")
    return [list(ids) for ids in raw]


def _encode(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "embedding")
    runtime = served.require_embedder()
    if body.dimensions is not None and body.dimensions != runtime.dimensions:
        raise RequestError(f"dimensions={body.dimensions} is not supported; this model returns {runtime.dimensions}",
                           "omit dimensions", param="dimensions")
    token_ids = await state.prompt_worker.run(lambda: _token_inputs(body, runtime))  # off the event loop
    vectors = await served.embedding_batcher.embed(token_ids)
    tokens = sum(len(ids) for ids in token_ids)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
                 for i, v in enumerate(vectors)],
        "model": body.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
