"""Batches concurrent embedding requests: one padded forward pass serves everything waiting.

Concurrent requests are not run one by one: each request's inputs join a queue, and a single worker
takes everything waiting (up to ``max_batch_tokens`` of padded input), runs it as one padded batch in
a worker thread, and hands every request its rows. The inputs are run in length-sorted batches
(edgeopt.server.batching.length_batches) so short texts are not padded to a long one's length.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from edgeopt.runtimes.base import EmbeddingRuntime
from edgeopt.server.batching.length_batches import DEFAULT_MAX_TOKENS, length_sorted_batches


@dataclass
class _Job:
    token_ids: list[list[int]]
    future: asyncio.Future = field(repr=False)

MAX_INPUTS = 2048  # texts in one embedding request, on every face (OpenAI's own limit per request)


class EmbeddingBatcher:
    """Collects inputs of concurrent requests and runs them together on ``runtime.embed_ids``."""

    def __init__(self, runtime: EmbeddingRuntime, max_batch_tokens: int = DEFAULT_MAX_TOKENS,
                 max_batch_inputs: int = 256) -> None:
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
