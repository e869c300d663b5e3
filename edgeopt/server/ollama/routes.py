"""Ollama's generating routes, /api/chat and /api/generate, over the neutral chat path.

A request is translated (ollama/translate.py) into the neutral chat request and prepared like every face's, so
templates, tools, ``format`` grammars, thinking and the prefix cache behave as on /v1/chat/completions; a
``raw`` generate is prepared as /v1/completions is. Replies stream as NDJSON unless ``stream`` is false (Ollama
streams by default); they are shaped by ollama/reply.py. An empty chat or prompt is Ollama's "load the
model" call: answered at once.
"""

from __future__ import annotations

import dataclasses
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from edgeopt.engine.api import SamplingParams
from edgeopt.errors import ContextOverflowError
from edgeopt.server.chat.logprobs import TokenTexts
from edgeopt.server.chat.prepare import Prepared, prepare_chat, prepare_raw
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.chat.request import ChatRequest
from edgeopt.server.generation.respond import generate
from edgeopt.server.http.json_body import CheckedJsonRoute
from edgeopt.server.ollama.load_calls import load_or_unload
from edgeopt.server.ollama.reply import OllamaReply, created_at
from edgeopt.server.ollama.schema import OllamaChatRequest, OllamaGenerateRequest
from edgeopt.server.ollama.translate import Translation, chat_request, generate_request
from edgeopt.server.state import ServerState

router = APIRouter(route_class=CheckedJsonRoute)  # the key is checked before routing (auth.py)


@router.post("/api/chat")
async def chat(body: OllamaChatRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    if not body.messages:
        reason = await load_or_unload(state, body.model, "generation", body.keep_alive)
        return JSONResponse({"model": body.model, "created_at": created_at(), "done": True, "done_reason": reason,
                             "message": {"role": "assistant", "content": ""}})
    translation = await chat_request(body, state)
    return await _run(state, request, body.model, translation, chat=True, stream=body.stream is not False)


@router.post("/api/generate")
async def generate_route(body: OllamaGenerateRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    if not body.prompt and not body.context:
        reason = await load_or_unload(state, body.model, "generation", body.keep_alive)
        return JSONResponse({"model": body.model, "created_at": created_at(), "response": "", "done": True,
                             "done_reason": reason})
    translation = await generate_request(body, state)
    return await _run(state, request, body.model, translation, chat=False, stream=body.stream is not False,
                      context_ids=list(body.context or []))


async def _run(state: ServerState, request: Request, model: str, translation: Translation, chat: bool, stream: bool,
               context_ids: list[int] | None = None) -> Response:
    body, served = translation.request, translation.served
    parser, texts = None, None
    special = state.settings.parse_special_in_content
    prepared: Prepared
    if isinstance(body, ChatRequest):
        prepared = chat_prepared = await prepare_chat(served, state.prompt_worker, body, special)
        parser = ReplyParser.for_reply(chat_prepared.tools, chat_prepared.reasoning)
        texts = TokenTexts(served.tokenizer) if chat_prepared.top_logprobs is not None else None
    else:
        prepared = await prepare_raw(served, state.prompt_worker, body)
    prompt_ids = prepared.prompt_ids
    if context_ids and not chat:
        prompt_ids = [*context_ids, *prompt_ids]  # Ollama's conversation so far, as the previous reply gave it
    prepared = Prepared(served, prompt_ids, _within(prepared.params, len(prompt_ids), translation.num_ctx))
    reply = OllamaReply(model, prompt_ids, parser, chat, texts, context_ids=None if chat else prompt_ids)
    return await generate(state, request, f"ollama-{uuid.uuid4().hex}", prepared, reply, stream,
                          prompt_param="messages" if chat else "prompt")


def _within(params: SamplingParams, prompt_len: int, num_ctx: int) -> SamplingParams:
    """``options.num_ctx`` narrows the context: the prompt must fit it, and the output stops at its end."""
    if prompt_len >= num_ctx:
        raise ContextOverflowError(f"prompt is {prompt_len} tokens, longer than options.num_ctx={num_ctx} (it must "
                                   "leave room for at least one generated token)",
                                   "shorten the prompt or raise options.num_ctx", param="options.num_ctx")
    return dataclasses.replace(params, max_tokens=min(params.max_tokens, num_ctx - prompt_len))
