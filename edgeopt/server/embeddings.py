"""POST /v1/embeddings for embedding bundles (OpenAI-compatible), with a batcher across requests.

Concurrent requests are not run one by one: each request's inputs join a queue, and a single worker
takes everything waiting (up to ``max_batch_tokens`` of padded input), runs it as one padded batch in
a worker thread, and hands every request its rows. The inputs are run in length-sorted batches
(edgeopt.server.length_batches) so short texts are not padded to a long one's length.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from edgeopt.errors import RequestError
from edgeopt.server.length_batches import DEFAULT_MAX_TOKENS, length_sorted_batches
from edgeopt.server.request_prep import check_model_name
from edgeopt.server.schemas import Text
from edgeopt.server.state import ServerState

router = APIRouter()  # the API key is checked before routing: edgeopt/server/auth.py
MAX_INPUTS = 2048  # OpenAI's own limit per request
BATCHER_KEY = "embedding_batcher"


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: Text
    input: Text | list[Text] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: Text | None = None


@dataclass
class _Job:
    token_ids: list[list[int]]
    future: asyncio.Future = field(repr=False)


class EmbeddingBatcher:
    """Collects inputs of concurrent requests and runs them together on ``runtime.embed_ids``."""

    def __init__(self, runtime: Any, max_batch_tokens: int = DEFAULT_MAX_TOKENS, max_batch_inputs: int = 256) -> None:
        self.runtime = runtime
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_inputs = max_batch_inputs
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task | None = None
        self.batches_run = 0  # for tests and metrics: how many forward passes served the requests

    async def embed(self, token_ids: list[list[int]]) -> np.ndarray:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._run())
        job = _Job(token_ids, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            jobs = [await self._queue.get()]
            await asyncio.sleep(0)  # let requests that arrived in the same tick join this batch
            while not self._queue.empty() and sum(len(j.token_ids) for j in jobs) < self.max_batch_inputs:
                jobs.append(self._queue.get_nowait())
            try:
                results = await asyncio.to_thread(self._embed_jobs, jobs)
            except Exception as exc:  # noqa: BLE001 - every waiting request must hear about the failure
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            for job, rows in zip(jobs, results):
                if not job.future.done():
                    job.future.set_result(rows)

    def _embed_jobs(self, jobs: list[_Job]) -> list[np.ndarray]:
        """Run all jobs' inputs in length-sorted batches; return each job's rows in its own order."""
        flat = [ids for job in jobs for ids in job.token_ids]
        out = np.zeros((len(flat), self.runtime.dimensions), dtype=np.float32)
        for batch in length_sorted_batches([len(ids) for ids in flat], self.max_batch_tokens):
            out[batch] = self.runtime.embed_ids([flat[i] for i in batch])
            self.batches_run += 1
        rows, offset = [], 0
        for job in jobs:
            rows.append(out[offset:offset + len(job.token_ids)])
            offset += len(job.token_ids)
        return rows


def _token_inputs(body: EmbeddingRequest, runtime: Any) -> list[list[int]]:
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
    served = state.ready_model()
    check_model_name(state, body.model)
    runtime = served.runtime
    if body.dimensions is not None and body.dimensions != runtime.dimensions:
        raise RequestError(f"dimensions={body.dimensions} is not supported; this model returns {runtime.dimensions}",
                           "omit dimensions", param="dimensions")
    token_ids = await state.prompt_worker.run(lambda: _token_inputs(body, runtime))  # off the event loop
    batcher = served.extras.get(BATCHER_KEY)
    if batcher is None:
        batcher = served.extras.setdefault(BATCHER_KEY, EmbeddingBatcher(runtime))
    vectors = await batcher.embed(token_ids)
    tokens = sum(len(ids) for ids in token_ids)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
                 for i, v in enumerate(vectors)],
        "model": body.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
