"""POST /v1/completions and /v1/chat/completions: translate, prepare, then the one generate path."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from edgeopt.server.chat.prepare import prepare_chat
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.generation.respond import generate
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.openai.chat_output import ChatOutput
from edgeopt.server.openai.choice import ChoiceFormat
from edgeopt.server.openai.completions import prepare_completion, respond_batch
from edgeopt.server.openai.format import ResponseShape
from edgeopt.server.openai.reply import OpenAIReply
from edgeopt.server.openai.schema import ChatCompletionRequest, CompletionRequest, GenerationFields
from edgeopt.server.openai.translate import chat_request
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    prompts = body.prompts()
    if len(prompts) > 1:  # a batch (lm-evaluation-harness sends token-id lists): one choice per prompt
        return await respond_batch(state, served, request, body, prompts)
    shape = ResponseShape(chat=False, request_id=f"cmpl-{uuid.uuid4().hex}", model=body.model)
    choice, prepared = await prepare_completion(state, served, body, prompts[0], shape)
    return await generate(state, request, shape.request_id, prepared, OpenAIReply(choice, include_usage(body)),
                          body.stream, prompt_param="prompt")


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    served = await state.model(body.model, "generation")
    prepared = await prepare_chat(served, state.prompt_worker, chat_request(body),
                                  state.settings.parse_special_in_content)
    shape = ResponseShape(chat=True, request_id=f"chatcmpl-{uuid.uuid4().hex}", model=body.model)
    reads = ReplyParser.for_reply(prepared.tools, prepared.reasoning) if prepared.reads_reply else None
    choice = ChoiceFormat(shape, served, prepared.prompt_ids, echo=False, logprobs=prepared.top_logprobs is not None,
                          output=ChatOutput(reads) if reads is not None else None)
    return await generate(state, request, shape.request_id, prepared, OpenAIReply(choice, include_usage(body)),
                          body.stream, prompt_param="messages")


def include_usage(body: GenerationFields) -> bool:
    """stream_options.include_usage: an extra last chunk carrying only the usage."""
    return bool(body.stream_options and body.stream_options.include_usage)
