"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the neutral chat path.

The request is translated into the neutral chat request (anthropic/translate.py) and prepared like any chat,
so templates, tool calls, constrained decoding and the prefix cache behave the same; the reply is read by the
same parser (thinking, answer, calls) and shaped as Anthropic's message (anthropic/output.py). Errors on these
routes take Anthropic's shape (anthropic/errors.py, registered for /v1/messages). ``anthropic-version`` and
``anthropic-beta`` headers are accepted and not needed: one version of the API is served (docs/api-messages.md).
"""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edgeopt.server.anthropic.output import MessageBuilder
from edgeopt.server.anthropic.reply import MessageReply
from edgeopt.server.anthropic.schema import CountTokensRequest, MessagesRequest
from edgeopt.server.anthropic.translate import translate
from edgeopt.server.chat.prepare import count_chat_tokens, prepare_chat
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.generation.respond import generate
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    prepared = await prepare_chat(served, state.prompt_worker, translate(body), state.settings.parse_special_in_content)
    # Claude Code asks for max_tokens=32000 whatever the model's context: as Anthropic's API now does, a
    # max_tokens beyond what the context leaves is no error; the reply stops at the context's end, with
    # stop_reason "model_context_window_exceeded".
    room = prepared.params.max_tokens  # prepared without a limit: all the context leaves after the prompt
    capped = dataclasses.replace(prepared, params=dataclasses.replace(prepared.params,
                                                                      max_tokens=min(body.max_tokens, room)))
    show_thinking = body.thinking is None or body.thinking.display != "omitted"
    builder = MessageBuilder(body.model, len(prepared.prompt_ids), show_thinking, window_bound=body.max_tokens > room)
    reply = MessageReply(builder, ReplyParser.for_reply(prepared.tools, prepared.reasoning))
    return await generate(state, request, builder.message_id, capped, reply, body.stream, prompt_param="messages")


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> JSONResponse:
    """The prompt's length in tokens, exactly as /v1/messages would render and tokenize it (tools, system,
    thinking switch and all)."""
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    count = await count_chat_tokens(served, state.prompt_worker, translate(body), state.settings.parse_special_in_content)
    return JSONResponse({"input_tokens": count})
