"""POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the chat path.

The request is translated into a chat request (edgeopt.server.responses_input) and prepared by
edgeopt.server.chat_prep like any chat, so templates, tool calls, constrained decoding and the prefix cache
behave the same; only the output is shaped differently (edgeopt.server.responses_output). ``store``
(true by default, as OpenAI's) keeps the response and its conversation (edgeopt.server.responses_store)
for ``previous_response_id`` and GET.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import TypeAdapter

from edgeopt.errors import EdgeoptError, RequestError, UnknownResponseError
from edgeopt.server.chat_prep import PreparedChat, prepare_chat
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.openai_format import ResponseShape
from edgeopt.server.reply_parser import ReplyDelta
from edgeopt.server.responses_input import LOGPROBS_INCLUDE, input_messages, translate
from edgeopt.server.responses_output import Event, ResponseBuilder, new_id, response_usage
from edgeopt.server.responses_schema import InputItem, ResponsesRequest
from edgeopt.server.responses_store import ResponseStore, StoredResponse
from edgeopt.server.state import ServerState
from edgeopt.server.streaming import SSE_HEADERS, ClientGone, Generation, finished_output, start_generation

router = APIRouter()  # the API key is checked before routing: edgeopt/server/auth.py
_ITEMS = TypeAdapter(list[InputItem])


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    state: ServerState = request.app.state.server
    store = state.responses
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        history = _stored(store, body.previous_response_id, param="previous_response_id").conversation
    translation = translate(body, history)
    prepared = await prepare_chat(state, translation.request, prompt_param="input", output_param="max_output_tokens")
    if not prepared.prompt_ids:
        raise RequestError("the prompt is empty (0 tokens)", "send some input text", param="input")
    response_id = new_id("resp")
    shape = ResponseShape(chat=True, request_id=response_id, model=body.model)
    # Text and logprobs only: the reply is read by the run's own parser (thinking, answer, calls).
    choice = ChoiceFormat(shape, state.ready_model(), prepared.prompt_ids, echo=False,
                          logprobs=prepared.top_logprobs is not None)
    run = _Run(state, body, prepared, choice, translation.conversation)
    generation = start_generation(state.ready_model().engine, response_id, prepared.prompt_ids, prepared.params,
                                  run.tracker, request)
    run.tracker.admitted(len(prepared.prompt_ids))
    if body.stream:
        return StreamingResponse(run.events(generation), media_type="text/event-stream",
                                 headers=SSE_HEADERS)
    last = await finished_output(generation, request, state.metrics)
    if last is None:
        return Response(status_code=499)
    run.builder.start()
    run.builder.step(run.deltas(last, first=True, finished=True), run.logprobs)
    run.builder.finish(last.finish_reason, run.usage(last))
    return JSONResponse(run.keep())


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> JSONResponse:
    return JSONResponse(_stored(request.app.state.server.responses, response_id).response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> JSONResponse:
    store = request.app.state.server.responses
    _stored(store, response_id)
    store.delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


def _stored(store: ResponseStore, response_id: str, param: str | None = None) -> StoredResponse:
    entry = store.get(response_id)
    if entry is None:
        raise UnknownResponseError(f"no stored response has the id {response_id!r} (never stored: store was "
                                   "false, or another server made it; or evicted: the store keeps the most "
                                   f"recently used responses within {store.budget_bytes} bytes)",
                                   "send the whole conversation as input instead, or raise the server's "
                                   "--responses-store", param=param)
    return entry


class _Run:
    """One response being generated: the builder, the parsers, and what is stored at the end."""

    def __init__(self, state: ServerState, body: ResponsesRequest, prepared: PreparedChat, choice: ChoiceFormat,
                 conversation: list[dict[str, Any]]) -> None:
        self.state = state
        self.body = body
        self.prompt_len = len(prepared.prompt_ids)
        self.choice = choice
        self.reply = prepared.reply_parser()  # thinking, answer and tool calls, as every face reads them
        self.builder = ResponseBuilder(body, choice.shape.request_id, logprobs=body.wants(LOGPROBS_INCLUDE))
        self.conversation = conversation
        self.tracker = state.metrics.track()
        self.logprobs: list[dict[str, Any]] | None = None

    def deltas(self, out: Any, first: bool, finished: bool) -> list[ReplyDelta]:
        text, logprobs = self.choice.content(out, first)
        self.logprobs = logprobs["content"] if logprobs else None
        return self.reply.step(text, finished)

    def usage(self, out: Any) -> dict[str, Any]:
        """Counted once the reply is read: the thinking's tokens are its text tokenized again (the engine
        counts tokens, not which of them were thinking)."""
        thinking = self.builder.reasoning_text()
        reasoning_tokens = len(self.state.ready_model().tokenizer.encode(thinking, add_special=False)) if thinking else 0
        return response_usage(self.prompt_len, out.completion_tokens, out.cached_tokens,
                              min(reasoning_tokens, out.completion_tokens))

    def keep(self) -> dict[str, Any]:
        """The final response object, stored (with its conversation) when the request asked."""
        response = self.builder.response()
        if self.body.store and self.builder.status != "failed":
            answer = input_messages(_ITEMS.validate_python(response["output"]))
            self.state.responses.put(response["id"], response, [*self.conversation, *answer])
        return response

    async def events(self, generation: Generation) -> AsyncIterator[bytes]:
        builder = self.builder
        first = True
        try:
            yield _sse(builder.start())
            async for out in generation:
                if out.finish_reason == "error":
                    events = builder.finish(None, self.usage(out), f"the model runtime failed: {out.error}")
                    yield _sse(events)
                    return
                events = builder.step(self.deltas(out, first, out.finished), self.logprobs)
                first = False
                if out.finished:
                    events += builder.finish(out.finish_reason, self.usage(out))
                    self.keep()
                if events:
                    yield _sse(events)
        except ClientGone:
            return
        except EdgeoptError as exc:  # the engine failed mid-stream: say so in-band, then end cleanly
            yield _sse(builder.finish(None, None, str(exc)))
        finally:
            await generation.aclose()


def _sse(events: list[Event]) -> bytes:
    """Server-sent events as OpenAI frames them: ``event:`` names the type, ``data:`` holds the event."""
    return b"".join(f"event: {e['type']}\ndata: ".encode()
                    + json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n" for e in events)
