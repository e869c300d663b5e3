"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat path.

The request is translated into a chat request (edgeopt.server.messages_input) and prepared by
edgeopt.server.chat_prep like any chat, so templates, tool calls, constrained decoding and the prefix cache
behave the same; the reply is read by the same parser (thinking, answer, calls) and shaped as Anthropic's
message (edgeopt.server.messages_output). Errors on these routes take Anthropic's shape
(edgeopt.server.errors). ``anthropic-version`` and ``anthropic-beta`` headers are accepted and not
needed: one version of the API is served (docs/api-messages.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from edgeopt.errors import EdgeoptError, RequestError
from edgeopt.server.chat_prep import count_chat_tokens, prepare_chat
from edgeopt.server.errors import anthropic_error_body
from edgeopt.server.messages_input import translate
from edgeopt.server.messages_output import MessageBuilder, new_message_id, sse_event
from edgeopt.server.messages_schema import CountTokensRequest, MessagesRequest
from edgeopt.server.reply_parser import ReplyParser
from edgeopt.server.state import ServerState
from edgeopt.server.streaming import SSE_HEADERS, ClientGone, Generation, finished_output, start_generation

router = APIRouter()  # the API key is checked before routing: edgeopt/server/auth.py


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    chat = translate(body, state.ready_model().reasoning)
    prepared = await prepare_chat(state, chat, prompt_param="messages", output_param="max_tokens")
    if not prepared.prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send some message text", param="messages")
    # Claude Code asks for max_tokens=32000 whatever the model's context: as Anthropic's API now does, a
    # max_tokens beyond what the context leaves is no error; the reply stops at the context's end, with
    # stop_reason "model_context_window_exceeded".
    room = prepared.params.max_tokens  # prepared without a limit: all the context leaves after the prompt
    params = dataclasses.replace(prepared.params, max_tokens=min(body.max_tokens, room))
    message_id = new_message_id()
    show_thinking = body.thinking is None or body.thinking.display != "omitted"
    builder = MessageBuilder(message_id, body.model, len(prepared.prompt_ids), show_thinking,
                             window_bound=body.max_tokens > room)
    reply = prepared.reply_parser()
    tracker = state.metrics.track()
    generation = start_generation(state.ready_model().engine, message_id, prepared.prompt_ids, params, tracker,
                                  request)
    tracker.admitted(len(prepared.prompt_ids))
    if body.stream:
        return StreamingResponse(_events(generation, builder, reply), media_type="text/event-stream",
                                 headers=SSE_HEADERS)
    last = await finished_output(generation, request, state.metrics)
    if last is None:
        return Response(status_code=499)
    builder.step(reply.step(last.text, finished=True))
    return JSONResponse(builder.message(last))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
    """The prompt's length in tokens, exactly as /v1/messages would render and tokenize it (tools, system,
    thinking switch and all)."""
    state: ServerState = request.app.state.server
    chat = translate(body, state.ready_model().reasoning)
    return JSONResponse({"input_tokens": await count_chat_tokens(state, chat)})


async def _events(generation: Generation, builder: MessageBuilder, reply: ReplyParser) -> AsyncIterator[bytes]:
    started = False
    try:
        async for out in generation:
            if not started:
                started = True
                for event in builder.start(out):
                    yield sse_event(event)
            if out.finish_reason == "error":
                yield _error_event(f"the model runtime failed while generating: {out.error}")
                return
            events = builder.step(reply.step(out.text, out.finished))
            if out.finished:
                events += builder.finish(out)
            for event in events:
                yield sse_event(event)
    except ClientGone:
        return
    except EdgeoptError as exc:  # the engine failed mid-stream: tell the client in-band, then end
        yield _error_event(str(exc))
    finally:
        await generation.aclose()


def _error_event(message: str) -> bytes:
    return sse_event(("error", anthropic_error_body(500, message)))
