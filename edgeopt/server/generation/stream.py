"""From an engine stream to an HTTP reply: a generation that frees its sequence when the client goes away.

:func:`start_generation` calls ``engine.add_request`` right away (so a refused request still gets a
proper 4xx before any response starts) and returns a :class:`Generation`. Whoever consumes it must
``aclose()`` it in a ``finally``: closing a generation that has not finished aborts it in the engine,
so a client that disconnects (the response task is cancelled, or we notice the disconnect ourselves
between outputs) always releases its sequence and KV cells.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import Request

from edgeopt.engine.api import RequestOutput, SamplingParams, ServingEngine
from edgeopt.engine.stream import RequestStream
from edgeopt.errors import BackendError
from edgeopt.server.http.callers import cache_namespace
from edgeopt.server.metrics import RequestTracker, ServerMetrics

# How often a generation checks whether its client is still there. A check (Starlette's is_disconnected)
# costs ~0.1 ms of the event loop's thread, which a stream's tokens otherwise compete with. Under uvicorn
# (ASGI spec 2.3) StreamingResponse already listens for the disconnect and cancels the stream at once, and
# under spec 2.4 the next write fails: the poll only matters while a stream's output is held back (tool
# calls, stop strings) and for non-streaming replies, where half a second is soon enough.
DISCONNECT_POLL_S = 0.5


class ClientGone(Exception):
    """The HTTP client disconnected before its request finished."""


class Generation:
    """Async iterator over one request's outputs that aborts the request unless it ran to the end."""

    def __init__(self, engine: ServingEngine, request_id: str, stream: RequestStream, tracker: RequestTracker,
                 request: Request) -> None:
        self.request_id = request_id
        self._engine = engine
        self._stream = stream.__aiter__()
        self._tracker = tracker
        self._request = request
        self._last_poll = time.monotonic()
        self.done = False

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.done:
            raise StopAsyncIteration
        now = time.monotonic()
        if now - self._last_poll >= DISCONNECT_POLL_S:
            self._last_poll = now
            if await self._request.is_disconnected():
                raise ClientGone(self.request_id)
        try:
            out = await self._stream.__anext__()
        except StopAsyncIteration:
            raise BackendError(f"the engine ended request {self.request_id} without a final output",
                               "this is a bug; please report it with the server log") from None
        self._tracker.on_output(out)
        self.done = out.finished
        return out

    async def aclose(self) -> None:
        if not self.done:
            self.done = True
            self._engine.abort(self.request_id)
            self._tracker.finish("abort")


def start_generation(engine: ServingEngine, request_id: str, prompt_ids: list[int], params: SamplingParams,
                     tracker: RequestTracker, request: Request) -> Generation:
    # raises RequestError subclasses now; the caller's namespace keeps its cached prefixes from other tenants
    stream = engine.add_request(request_id, prompt_ids, params, cache_namespace(request))
    return Generation(engine, request_id, stream, tracker, request)


async def collect(generation: Generation, request: Request) -> RequestOutput:
    """Gather a whole generation (merged into one output) for a non-streaming response, aborting it if
    the client disconnects."""
    outputs: list[RequestOutput] = []

    async def gather() -> None:
        async for out in generation:
            outputs.append(out)

    task = asyncio.ensure_future(gather())
    try:
        # The event loop never blocks on decode; we wake up now and then only to notice a vanished client.
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                raise ClientGone(generation.request_id)
        task.result()  # re-raise whatever the generation raised
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await generation.aclose()
    return RequestOutput.merge(outputs)


async def collect_all(generations: list[Generation], request: Request,
                      metrics: ServerMetrics) -> list[RequestOutput] | None:
    """Every generation's whole output, in order (a batch answered as one reply); None when the client left
    first (counted as a 499). Every generation is closed: an unfinished one is aborted."""
    try:
        return list(await asyncio.gather(*(collect(generation, request) for generation in generations)))
    except ClientGone:
        metrics.count_error(499)
        return None
    finally:
        for generation in generations:
            await generation.aclose()


async def finished_output(generation: Generation, request: Request, metrics: ServerMetrics) -> RequestOutput | None:
    """The whole output of a non-streamed reply, for every API face; None when the client left first (counted
    as a 499, nginx's "client closed request": nobody reads the reply). A runtime failure is a BackendError."""
    try:
        last = await collect(generation, request)
    except ClientGone:
        metrics.count_error(499)
        return None
    if last.finish_reason == "error":
        raise BackendError(f"the model runtime failed while generating: {last.error}", "see the server log")
    return last
