"""The one generate-and-stream path every API face answers through.

A face prepares its request (edgeopt.server.chat.prepare: the model, prompt ids, SamplingParams), then hands it here with a
:class:`ReplyFormat`: how its outputs become wire frames (SSE events, NDJSON lines) and how a whole reply
becomes one JSON body. Written once here: the empty-prompt refusal, admission into the engine (a refused
request still gets its 4xx before any response starts), the request's metrics, cancellation when the client
goes away (499, nginx's "client closed request"), and the in-band error tail of a stream that fails midway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from edgeopt.engine.api import RequestOutput
from edgeopt.errors import EdgeoptError, RequestError
from edgeopt.server.chat.prepare import Prepared
from edgeopt.server.generation.stream import (
    ClientGone,
    Generation,
    finished_output,
    start_generation,
)
from edgeopt.server.state import ServerState

SSE_MEDIA_TYPE = "text/event-stream"
NDJSON_MEDIA_TYPE = "application/x-ndjson"
# For every event stream: no cache may hold it, and nginx must not buffer it (X-Accel-Buffering).
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ReplyFormat(Protocol):
    """A face's shape of one reply: streamed frame by frame, or whole."""

    media_type: str  # of the stream: SSE_MEDIA_TYPE or NDJSON_MEDIA_TYPE

    def opening(self) -> bytes:
        """Frames sent before the first output (b"": none)."""

    def frames(self, out: RequestOutput) -> bytes:
        """Frames for one engine output, the final one included (b"": nothing worth sending yet)."""

    def closing(self) -> bytes:
        """Frames after the final output (OpenAI's ``data: [DONE]``)."""

    def failed(self, message: str) -> bytes:
        """The in-band error tail: the stream ends after it."""

    def whole(self, last: RequestOutput) -> dict[str, Any]:
        """The non-streamed reply, from the merged output of the whole generation."""


async def generate(state: ServerState, request: Request, request_id: str, prepared: Prepared, reply: ReplyFormat,
                   stream: bool, prompt_param: str) -> Response:
    """Queue the prepared request and answer it in ``reply``'s shape. ``prompt_param``: the face's name of the
    prompt, blamed when it is empty."""
    if not prepared.prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send at least one token of text", param=prompt_param)
    generation = admit(state, request, request_id, prepared)
    if stream:
        return StreamingResponse(stream_frames(generation, reply), media_type=reply.media_type,
                                 headers=STREAM_HEADERS)
    last = await finished_output(generation, request, state.metrics)
    if last is None:
        return Response(status_code=499)
    return JSONResponse(reply.whole(last))


def admit(state: ServerState, request: Request, request_id: str, prepared: Prepared) -> Generation:
    """Add the request to its model's engine (raising its refusal now) and start counting it in the metrics."""
    tracker = state.metrics.track(prepared.served.name)
    generation = start_generation(prepared.served.engine, request_id, prepared.prompt_ids, prepared.params, tracker,
                                  request)
    tracker.admitted(len(prepared.prompt_ids))
    return generation


async def stream_frames(generation: Generation, reply: ReplyFormat) -> AsyncIterator[bytes]:
    """The stream's bytes; the generation is aborted (its KV freed) if the stream stops before its end."""
    try:
        opening = reply.opening()
        if opening:
            yield opening
        async for out in generation:
            if out.finish_reason == "error":
                yield reply.failed(f"the model runtime failed while generating: {out.error}")
                return
            frames = reply.frames(out)
            if frames:
                yield frames
        closing = reply.closing()
        if closing:
            yield closing
    except ClientGone:
        return
    except EdgeoptError as exc:  # the engine failed mid-stream: tell the client in-band, then end cleanly
        yield reply.failed(str(exc))
    finally:
        await generation.aclose()
