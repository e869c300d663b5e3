"""Batches concurrent rerank requests: one padded forward pass serves the pairs of everything waiting.

The same shape as edgeopt/server/batching/embedding_batcher.py: each request's tokenized pairs join a queue; one
worker takes everything waiting (up to ``max_batch_pairs``), runs it in length-sorted batches
(edgeopt.server.batching.length_batches, so a short pair is not padded to a long one's length) in a worker thread,
and hands every request its scores.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from edgeopt.runtimes.base import EncodedPair, RerankRuntime
from edgeopt.server.batching.length_batches import DEFAULT_MAX_TOKENS, length_sorted_batches


@dataclass
class _Job:
    pairs: list[EncodedPair]
    future: asyncio.Future = field(repr=False)


class RerankBatcher:
    """Collects the pairs of concurrent requests and scores them together on ``runtime.score_pairs``."""

    def __init__(self, runtime: RerankRuntime, max_batch_tokens: int = DEFAULT_MAX_TOKENS,
                 max_batch_pairs: int = 256) -> None:
        self.runtime = runtime
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_pairs = max_batch_pairs
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches_run = 0  # for tests: how many forward passes served the requests

    async def score(self, pairs: list[EncodedPair]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (a queue belongs to the loop it was made on)
            self._loop, self._queue = loop, asyncio.Queue()
            self._worker = loop.create_task(self._run(self._queue))
        assert self._queue is not None
        job = _Job(pairs, loop.create_future())
        await self._queue.put(job)
        return await job.future

    async def _run(self, queue: asyncio.Queue[_Job]) -> None:
        while True:
            jobs = [await queue.get()]
            await asyncio.sleep(0)  # let requests that arrived in the same tick join this batch
            while not queue.empty() and sum(len(j.pairs) for j in jobs) < self.max_batch_pairs:
                jobs.append(queue.get_nowait())
            try:
                results = await asyncio.to_thread(self._score_jobs, jobs)
            except Exception as exc:  # noqa: BLE001 - every waiting request must hear about the failure
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            for job, scores in zip(jobs, results):
                if not job.future.done():
                    job.future.set_result(scores)

    def _score_jobs(self, jobs: list[_Job]) -> list[np.ndarray]:
        """Score all jobs' pairs in length-sorted batches; return each job's scores in its own order."""
        flat = [pair for job in jobs for pair in job.pairs]
        out = np.zeros((len(flat),), dtype=np.float32)
        for batch in length_sorted_batches([len(pair) for pair in flat], self.max_batch_tokens):
            out[batch] = self.runtime.score_pairs([flat[i] for i in batch])
            self.batches_run += 1
        scores, offset = [], 0
        for job in jobs:
            scores.append(out[offset:offset + len(job.pairs)])
            offset += len(job.pairs)
        return scores

