"""One response being generated -> its SSE events or its whole response object, and what is stored at the end:
the Responses face's :class:`~edgeopt.server.generation.respond.ReplyFormat`."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import TypeAdapter

from edgeopt.engine.api import RequestOutput
from edgeopt.server.chat.logprobs import TokenTexts, token_entries
from edgeopt.server.chat.prepare import PreparedChat
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.chat.request import Message
from edgeopt.server.generation.respond import SSE_MEDIA_TYPE
from edgeopt.server.responses.output import Event, ResponseBuilder, response_usage
from edgeopt.server.responses.schema import InputItem, ResponsesRequest
from edgeopt.server.responses.store import ResponseStore
from edgeopt.server.responses.translate import input_messages

_ITEMS = TypeAdapter(list[InputItem])


class ResponseReply:
    media_type = SSE_MEDIA_TYPE

    def __init__(self, body: ResponsesRequest, prepared: PreparedChat, store: ResponseStore,
                 conversation: tuple[Message, ...], owner: str | None) -> None:
        """``conversation``: the turns so far (instructions excluded), kept with the answer when ``store``;
        ``owner``: the caller it is stored for (edgeopt.server.http.callers)."""
        self._owner = owner
        self._body = body
        self._prompt_len = len(prepared.prompt_ids)
        # thinking, answer and tool calls, as every face reads them
        self._parser = ReplyParser.for_reply(prepared.tools, prepared.reasoning)
        tokenizer = prepared.served.tokenizer
        self._texts = TokenTexts(tokenizer) if prepared.top_logprobs is not None else None
        self._tokenizer = tokenizer
        self._store = store
        self._conversation = conversation
        self.response_id = f"resp_{uuid.uuid4().hex}"
        self.builder = ResponseBuilder(body, self.response_id, logprobs=prepared.top_logprobs is not None)

    def opening(self) -> bytes:
        return _sse(self.builder.start())

    def frames(self, out: RequestOutput) -> bytes:
        events = self._step(out)
        if out.finished:
            events += self.builder.finish(out.finish_reason, self._usage(out))
            self._keep()
        return _sse(events)

    def closing(self) -> bytes:
        return b""

    def failed(self, message: str) -> bytes:
        return _sse(self.builder.finish(None, None, message))

    def whole(self, last: RequestOutput) -> dict[str, Any]:
        self.builder.start()
        self._step(last)
        self.builder.finish(last.finish_reason, self._usage(last))
        return self._keep()

    def _step(self, out: RequestOutput) -> list[Event]:
        logprobs = token_entries(out.logprobs or [], self._texts) if self._texts is not None else None
        return self.builder.step(self._parser.step(out.text, out.finished), logprobs)

    def _usage(self, out: RequestOutput) -> dict[str, Any]:
        """Counted once the reply is read: the thinking's tokens are its text tokenized again (the engine
        counts tokens, not which of them were thinking)."""
        thinking = self.builder.reasoning_text()
        reasoning_tokens = len(self._tokenizer.encode(thinking, add_special=False)) if thinking else 0
        return response_usage(self._prompt_len, out.completion_tokens, out.cached_tokens,
                              min(reasoning_tokens, out.completion_tokens))

    def _keep(self) -> dict[str, Any]:
        """The final response object, stored (with its conversation) when the request asked."""
        response = self.builder.response()
        if self._body.store and self.builder.status != "failed":
            answer = input_messages(_ITEMS.validate_python(response["output"]))
            self._store.put(response["id"], response, (*self._conversation, *answer), self._owner)
        return response


def _sse(events: list[Event]) -> bytes:
    """Server-sent events as OpenAI frames them: ``event:`` names the type, ``data:`` holds the event."""
    return b"".join(f"event: {e['type']}\ndata: ".encode()
                    + json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n" for e in events)
