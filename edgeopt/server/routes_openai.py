"""POST /v1/completions and /v1/chat/completions: validate, tokenize, queue, stream or collect."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from edgeopt.engine.api import RequestOutput, SamplingParams
from edgeopt.errors import EdgeoptError, RequestError
from edgeopt.server.chat_output import ChatStep
from edgeopt.server.chat_prep import prepare_chat
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.errors import error_body
from edgeopt.server.openai_format import ResponseShape, usage
from edgeopt.server.completion_prep import prepare_completion, respond_batch
from edgeopt.server.request_prep import check_model_name
from edgeopt.server.schemas import ChatCompletionRequest, CompletionRequest
from edgeopt.server.state import ServerState
from edgeopt.server.streaming import DONE, SSE_HEADERS, ClientGone, Generation, finished_output, sse, start_generation

router = APIRouter()  # the API key is checked before routing: edgeopt/server/auth.py


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    state.ready_model()
    check_model_name(state, body.model)
    prompts = body.prompts()
    if len(prompts) > 1:  # a batch (lm-evaluation-harness sends token-id lists): one choice per prompt
        return await respond_batch(state, request, body, prompts)
    shape = ResponseShape(chat=False, request_id=f"cmpl-{uuid.uuid4().hex}", model=body.model)
    choice, params = await prepare_completion(state, body, prompts[0], shape)
    return await _respond(state, request, choice, params, body.stream, body.include_usage_chunk())


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    prepared = await prepare_chat(state, body)
    shape = ResponseShape(chat=True, request_id=f"chatcmpl-{uuid.uuid4().hex}", model=body.model)
    return await _respond(state, request, prepared.choice_format(state, shape), prepared.params, body.stream,
                          body.include_usage_chunk())


async def _respond(state: ServerState, request: Request, choice: ChoiceFormat, params: SamplingParams,
                   stream: bool, include_usage: bool) -> Response:
    shape, prompt_ids = choice.shape, choice.prompt_ids
    if not prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send at least one token of text",
                           param="messages" if shape.chat else "prompt")
    engine = state.ready_model().engine
    tracker = state.metrics.track()
    generation = start_generation(engine, shape.request_id, prompt_ids, params, tracker, request)
    tracker.admitted(len(prompt_ids))
    if stream:
        return StreamingResponse(_sse_events(generation, choice, include_usage),
                                 media_type="text/event-stream",
                                 headers=SSE_HEADERS)
    last = await finished_output(generation, request, state.metrics)
    if last is None:
        return Response(status_code=499)
    counts = usage(len(prompt_ids), choice.completion_tokens(last), last.cached_tokens)
    text, logprobs = choice.content(last, first=True)
    if choice.output is None:
        return JSONResponse(shape.full(text, last.finish_reason, counts, logprobs))
    reply = choice.output.whole(text)
    content = (reply.content or None) if reply.tool_calls else reply.content  # None: the message only calls
    return JSONResponse(shape.full(content, choice.output.finish_reason(last.finish_reason), counts, logprobs,
                                   reply.tool_calls, reply.reasoning))


async def _sse_events(generation: Generation, choice: ChoiceFormat, include_usage: bool) -> AsyncIterator[bytes]:
    shape = choice.shape
    first = True
    try:
        if shape.chat:
            yield sse(shape.chunk("", first=True))
        async for out in generation:
            if out.finish_reason == "error":
                yield sse(error_body(f"the model runtime failed while generating: {out.error}", "server_error"))
                break
            text, logprobs = choice.content(out, first)
            first = False
            step = ChatStep(text) if choice.output is None else choice.output.stream_step(text, out.finished)
            if out.finished:
                yield _final_chunk(choice, out, step, logprobs, include_usage)
            elif step.content or step.reasoning or logprobs or step.tool_calls:
                yield sse(shape.chunk(step.content, logprobs=logprobs, tool_calls=step.tool_calls,
                                      reasoning=step.reasoning))
        yield DONE
    except ClientGone:
        return
    except EdgeoptError as exc:  # the engine failed mid-stream: tell the client in-band, then end cleanly
        yield sse(error_body(str(exc), "server_error"))
        yield DONE
    finally:
        await generation.aclose()


def _final_chunk(choice: ChoiceFormat, out: RequestOutput, step: ChatStep, logprobs: dict[str, Any] | None,
                 include_usage: bool) -> bytes:
    shape = choice.shape
    counts = usage(len(choice.prompt_ids), choice.completion_tokens(out), out.cached_tokens)
    reason = out.finish_reason if choice.output is None else choice.output.finish_reason(out.finish_reason)
    data = sse(shape.chunk(step.content, reason, counts, logprobs=logprobs, tool_calls=step.tool_calls,
                           reasoning=step.reasoning))
    if include_usage:
        data += sse(shape.usage_chunk(counts))
    return data
