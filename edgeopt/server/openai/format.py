"""The JSON shapes of OpenAI responses and stream chunks, for chat and plain completions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens``: prompt tokens the prefix cache served."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


@dataclass(frozen=True)
class ResponseShape:
    chat: bool
    request_id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def _envelope(self, streaming: bool) -> dict[str, Any]:
        if self.chat:
            obj = "chat.completion.chunk" if streaming else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.request_id, "object": obj, "created": self.created, "model": self.model}

    def full(self, text: str | None, finish_reason: str | None, counts: dict[str, int],
             logprobs: dict[str, Any] | None = None, tool_calls: list[dict[str, Any]] | None = None,
             reasoning: str = "") -> dict[str, Any]:
        body = self._envelope(streaming=False)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                message.update(_reasoning_fields(reasoning))
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        body["choices"] = [choice]
        body["usage"] = counts
        return body

    def chunk(self, text: str, finish_reason: str | None = None, counts: dict[str, int] | None = None,
              first: bool = False, logprobs: dict[str, Any] | None = None,
              tool_calls: list[dict[str, Any]] | None = None, reasoning: str = "") -> dict[str, Any]:
        body = self._envelope(streaming=True)
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta["content"] = text
            if reasoning:
                delta.update(_reasoning_fields(reasoning))
            if tool_calls:
                delta["tool_calls"] = tool_calls
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        body["choices"] = [choice]
        if counts is not None:
            body["usage"] = counts
        return body

    def usage_chunk(self, counts: dict[str, int]) -> dict[str, Any]:
        """The extra last chunk of ``stream_options.include_usage``: no choices, only usage."""
        body = self._envelope(streaming=True)
        body["choices"] = []
        body["usage"] = counts
        return body


def _reasoning_fields(text: str) -> dict[str, str]:
    """The thinking under both names clients read: llama-server's ``reasoning_content``, and ``reasoning``
    (vLLM, Ollama's OpenAI layer, OpenRouter)."""
    return {"reasoning_content": text, "reasoning": text}
