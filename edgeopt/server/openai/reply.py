"""One OpenAI choice being generated -> its SSE chunks (``data: {...}`` then ``data: [DONE]``) or its whole
chat.completion / text_completion body: the OpenAI face's :class:`~edgeopt.server.generation.respond.ReplyFormat`."""

from __future__ import annotations

import json
from typing import Any

from edgeopt.engine.api import RequestOutput
from edgeopt.server.errors import error_body
from edgeopt.server.generation.respond import SSE_MEDIA_TYPE
from edgeopt.server.openai.chat_output import ChatStep
from edgeopt.server.openai.choice import ChoiceFormat
from edgeopt.server.openai.format import usage

DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


class OpenAIReply:
    media_type = SSE_MEDIA_TYPE

    def __init__(self, choice: ChoiceFormat, include_usage: bool) -> None:
        """``include_usage``: stream_options.include_usage, an extra last chunk with only the usage."""
        self.choice = choice
        self._include_usage = include_usage
        self._first = True

    def opening(self) -> bytes:
        return sse(self.choice.shape.chunk("", first=True)) if self.choice.shape.chat else b""

    def frames(self, out: RequestOutput) -> bytes:
        choice, shape = self.choice, self.choice.shape
        text, logprobs = choice.content(out, self._first)
        self._first = False
        step = ChatStep(text) if choice.output is None else choice.output.stream_step(text, out.finished)
        if out.finished:
            counts = self._usage(out)
            data = sse(shape.chunk(step.content, self._finish_reason(out), counts, logprobs=logprobs,
                                   tool_calls=step.tool_calls, reasoning=step.reasoning))
            return data + sse(shape.usage_chunk(counts)) if self._include_usage else data
        if step.content or step.reasoning or logprobs or step.tool_calls:
            return sse(shape.chunk(step.content, logprobs=logprobs, tool_calls=step.tool_calls,
                                   reasoning=step.reasoning))
        return b""

    def closing(self) -> bytes:
        return DONE

    def failed(self, message: str) -> bytes:
        return sse(error_body(message, "server_error")) + DONE

    def whole(self, last: RequestOutput) -> dict[str, Any]:
        choice = self.choice
        text, logprobs = choice.content(last, first=True)
        if choice.output is None:
            return choice.shape.full(text, last.finish_reason, self._usage(last), logprobs)
        reply = choice.output.whole(text)
        content = (reply.content or None) if reply.tool_calls else reply.content  # None: the message only calls
        return choice.shape.full(content, self._finish_reason(last), self._usage(last), logprobs, reply.tool_calls,
                                 reply.reasoning)

    def _usage(self, out: RequestOutput) -> dict[str, Any]:
        return usage(len(self.choice.prompt_ids), self.choice.completion_tokens(out), out.cached_tokens)

    def _finish_reason(self, out: RequestOutput) -> str | None:
        output = self.choice.output
        return out.finish_reason if output is None else output.finish_reason(out.finish_reason)
