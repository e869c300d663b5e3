"""One Ollama reply being generated -> its NDJSON lines (streamed) or its one JSON object.

The engine's outputs are read as on every face: thinking, answer and tool calls by the chat's ReplyParser
(edgeopt.server.chat.reply), logprobs as the neutral token entries (edgeopt.server.chat.logprobs). What is Ollama's own: the field
names (``message``/``response``, ``thinking``, ``done``, ``done_reason``), tool calls as whole objects
with decoded arguments (sent once complete, in the last line), and the timings in nanoseconds.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from edgeopt.engine.api import RequestOutput
from edgeopt.server.chat.logprobs import TokenTexts, token_entries
from edgeopt.server.chat.reasoning.parser import ReasoningDelta
from edgeopt.server.chat.reply import ReplyParser
from edgeopt.server.chat.tools.deltas import ContentDelta, ToolCallDelta, collect
from edgeopt.server.generation.respond import NDJSON_MEDIA_TYPE


def created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ndjson(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode() + b"\n"


class OllamaReply:
    """The Ollama face's :class:`~edgeopt.server.generation.respond.ReplyFormat`: NDJSON lines, or one object."""

    media_type = NDJSON_MEDIA_TYPE

    def __init__(self, model: str, prompt_ids: list[int], parser: ReplyParser | None, chat: bool,
                 texts: TokenTexts | None = None, context_ids: list[int] | None = None) -> None:
        """``chat``: /api/chat's ``message`` shape, else /api/generate's ``response``; ``texts``: the model's token
        texts when logprobs were asked; ``context_ids``: a generate's prompt ids, returned with its output ids
        as ``context`` in the last line."""
        self.model = model
        self._prompt_len = len(prompt_ids)
        self._texts = texts
        self._parser = parser
        self._chat = chat
        self._context = context_ids
        self._calls: list[ToolCallDelta] = []
        self._generated: list[int] = []
        self._started = time.perf_counter_ns()
        self._first_output: int | None = None

    def opening(self) -> bytes:
        return b""

    def frames(self, out: RequestOutput) -> bytes:
        line = self.step(out)
        return ndjson(line) if out.finished or _carries(line) else b""

    def closing(self) -> bytes:
        return b""

    def failed(self, message: str) -> bytes:
        return ndjson({"error": message})  # in-band, as Ollama does

    def whole(self, last: RequestOutput) -> dict[str, Any]:
        return self.step(last)

    def step(self, out: RequestOutput) -> dict[str, Any]:
        """The line for one engine output (the last one carries done, the reason, the calls and the timings)."""
        if self._first_output is None:
            self._first_output = time.perf_counter_ns()
        self._generated += out.token_ids
        content, thinking = out.text, ""
        if self._parser is not None:
            deltas = self._parser.step(out.text, out.finished)
            content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
            thinking = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
            self._calls += [d for d in deltas if isinstance(d, ToolCallDelta)]
        line = self._body(content, thinking)
        if self._texts is not None:
            line["logprobs"] = token_entries(out.logprobs or [], self._texts)
        if out.finished:
            self._finish(line, out)
        return line

    def _body(self, content: str, thinking: str) -> dict[str, Any]:
        line: dict[str, Any] = {"model": self.model, "created_at": created_at()}
        if self._chat:
            line["message"] = {"role": "assistant", "content": content, **({"thinking": thinking} if thinking else {})}
        else:
            line["response"] = content
            if thinking:
                line["thinking"] = thinking
        line["done"] = False
        return line

    def _finish(self, line: dict[str, Any], out: RequestOutput) -> None:
        end = time.perf_counter_ns()
        first = self._first_output or end
        calls = [{"function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}}
                 for c in collect(self._calls)[1]]
        line.update({
            "done": True, "done_reason": "length" if out.finish_reason == "length" else "stop",
            "total_duration": end - self._started, "load_duration": 0,
            "prompt_eval_count": self._prompt_len, "prompt_eval_duration": first - self._started,
            "eval_count": out.completion_tokens, "eval_duration": end - first,
        })
        if calls and self._chat:
            line["message"]["tool_calls"] = calls
        if self._context is not None:
            line["context"] = [*self._context, *self._generated]


def _arguments(text: str) -> Any:
    """A call's arguments as an object: the model's JSON text decoded (kept as text when it is not JSON)."""
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return text


def _carries(line: dict[str, Any]) -> bool:
    """A line worth sending: it adds text, thinking or logprobs (a tool call's text is held until it ends)."""
    part = line.get("message", line)
    return bool(part.get("content") or part.get("response") or part.get("thinking") or line.get("logprobs"))
