"""Ollama's generating routes, /api/chat and /api/generate, over the one chat path.

A request is translated (edgeopt.server.ollama_translate) into a chat request and prepared by
edgeopt.server.chat_prep like every face's, so templates, tools, ``format`` grammars, thinking and the
prefix cache behave as on /v1/chat/completions; a ``raw`` generate is prepared as /v1/completions is.
Replies stream as NDJSON unless ``stream`` is false (Ollama streams by default); they are shaped by
edgeopt.server.ollama_reply. An empty chat or prompt is Ollama's "load the model" call: answered at once.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from edgeopt.engine.api import SamplingParams
from edgeopt.errors import ContextOverflowError, EdgeoptError, RequestError
from edgeopt.server.chat_prep import prepare_chat
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.ollama_options import resolve_model
from edgeopt.server.ollama_reply import OllamaReply, created_at, ndjson
from edgeopt.server.ollama_schema import OllamaChatRequest, OllamaGenerateRequest
from edgeopt.server.ollama_translate import Translation, chat_request, generate_request
from edgeopt.server.openai_format import ResponseShape
from edgeopt.server.request_prep import completion_prompt_ids, output_budget, sampling_params
from edgeopt.server.response_format import compile_grammar, response_grammar_spec
from edgeopt.server.schemas import ChatCompletionRequest, CompletionRequest
from edgeopt.server.state import ServerState
from edgeopt.server.streaming import ClientGone, Generation, finished_output, start_generation

router = APIRouter()  # the API key is checked before routing: edgeopt/server/auth.py


@router.post("/api/chat")
async def chat(body: OllamaChatRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    model = resolve_model(state, body.model)
    served = state.ready_model()
    if not body.messages:
        return JSONResponse({"model": body.model, "created_at": created_at(), "done": True,
                             "done_reason": "unload" if body.keep_alive in (0, "0") else "load",
                             "message": {"role": "assistant", "content": ""}})
    translation = chat_request(body, model, served)
    return await _run(state, request, body.model, translation, chat=True, stream=body.stream is not False)


@router.post("/api/generate")
async def generate(body: OllamaGenerateRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    model = resolve_model(state, body.model)
    served = state.ready_model()
    if not body.prompt and not body.context:
        return JSONResponse({"model": body.model, "created_at": created_at(), "response": "", "done": True,
                             "done_reason": "unload" if body.keep_alive in (0, "0") else "load"})
    translation = generate_request(body, model, served)
    return await _run(state, request, body.model, translation, chat=False, stream=body.stream is not False,
                      context_ids=list(body.context or []))


@router.post("/api/embed")
@router.post("/api/embeddings")
async def embed_refused(request: Request) -> None:
    raise RequestError("this server serves a language model, which does not produce embeddings here",
                       "serve an embedding bundle (edgeopt optimize an encoder) and send /api/embed to it")


async def _run(state: ServerState, request: Request, model: str, translation: Translation, chat: bool, stream: bool,
               context_ids: list[int] | None = None) -> Response:
    body = translation.request
    if isinstance(body, ChatCompletionRequest):
        prepared = await prepare_chat(state, body, prompt_param="messages" if chat else "prompt",
                                      output_param="options.num_predict")
        prompt_ids, params, parser = prepared.prompt_ids, prepared.params, prepared.reply_parser()
        logprobs = prepared.top_logprobs is not None
    else:
        prompt_ids, params = await _raw_prompt(state, body)
        parser, logprobs = None, False
    if context_ids and not chat:
        prompt_ids = [*context_ids, *prompt_ids]  # Ollama's conversation so far, as the previous reply gave it
    params = _within(params, len(prompt_ids), translation.num_ctx)
    if not prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send some text", param="prompt")
    served = state.ready_model()
    shape = ResponseShape(chat=chat, request_id=f"ollama-{uuid.uuid4().hex}", model=model)
    choice = ChoiceFormat(shape, served, prompt_ids, echo=False, logprobs=logprobs)
    reply = OllamaReply(model, choice, parser, chat, context_ids=None if chat else prompt_ids)
    tracker = state.metrics.track()
    generation = start_generation(served.engine, shape.request_id, prompt_ids, params, tracker, request)
    tracker.admitted(len(prompt_ids))
    if stream:
        return StreamingResponse(_lines(generation, reply), media_type="application/x-ndjson")
    last = await finished_output(generation, request, state.metrics)
    if last is None:
        return Response(status_code=499)
    return JSONResponse(reply.step(last, first=True))


async def _raw_prompt(state: ServerState, body: CompletionRequest) -> tuple[list[int], SamplingParams]:
    """A raw generate: the prompt tokenized as given (control-token text parsed), as /v1/completions does."""
    served = state.ready_model()
    spec = response_grammar_spec(body.response_format)
    prompt_ids, grammar = await state.prompt_worker.run(
        lambda: (completion_prompt_ids(served, body.prompts()[0]), compile_grammar(served, spec)))
    max_tokens = output_budget(body.max_tokens, len(prompt_ids), served.context_length, None, prompt_param="prompt",
                               output_param="options.num_predict")
    return prompt_ids, sampling_params(body, max_tokens, served.runtime.info.vocab_size, grammar=grammar)


def _within(params: SamplingParams, prompt_len: int, num_ctx: int) -> SamplingParams:
    """``options.num_ctx`` narrows the context: the prompt must fit it, and the output stops at its end."""
    if prompt_len >= num_ctx:
        raise ContextOverflowError(f"prompt is {prompt_len} tokens, longer than options.num_ctx={num_ctx} (it must "
                                   "leave room for at least one generated token)",
                                   "shorten the prompt or raise options.num_ctx", param="options.num_ctx")
    return dataclasses.replace(params, max_tokens=min(params.max_tokens, num_ctx - prompt_len))


async def _lines(generation: Generation, reply: OllamaReply) -> AsyncIterator[bytes]:
    first = True
    try:
        async for out in generation:
            if out.finish_reason == "error":
                yield ndjson({"error": f"the model runtime failed while generating: {out.error}"})
                return
            line = reply.step(out, first)
            first = False
            if out.finished or _carries(line):
                yield ndjson(line)
    except ClientGone:
        return
    except EdgeoptError as exc:  # the engine failed mid-stream: say so in-band, as Ollama does
        yield ndjson({"error": str(exc)})
    finally:
        await generation.aclose()


def _carries(line: dict[str, Any]) -> bool:
    """A line worth sending: it adds text, thinking or logprobs (a tool call's text is held until it ends)."""
    part = line.get("message", line)
    return bool(part.get("content") or part.get("response") or part.get("thinking") or line.get("logprobs"))
