"""One Ollama reply being generated -> its NDJSON lines (streamed) or its one JSON object.

The engine's outputs are read as on every face: text and logprobs by ChoiceFormat, thinking, answer and
tool calls by the chat's ReplyParser (edgeopt.server.reply_parser). What is Ollama's own: the field
names (``message``/``response``, ``thinking``, ``done``, ``done_reason``), tool calls as whole objects
with decoded arguments (sent once complete, in the last line), and the timings in nanoseconds.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from edgeopt.engine.api import RequestOutput
from edgeopt.server.choice_format import ChoiceFormat
from edgeopt.server.reasoning_parser import ReasoningDelta
from edgeopt.server.reply_parser import ReplyParser
from edgeopt.server.tool_parser import ContentDelta, ToolCallDelta, collect


def created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ndjson(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode() + b"\n"


class OllamaReply:
    def __init__(self, model: str, choice: ChoiceFormat, parser: ReplyParser | None, chat: bool,
                 context_ids: list[int] | None = None) -> None:
        """``chat``: /api/chat's ``message`` shape, else /api/generate's ``response``; ``context_ids``: a
        generate's prompt ids, returned with its output ids as ``context`` in the last line."""
        self.model = model
        self._choice = choice
        self._parser = parser
        self._chat = chat
        self._context = context_ids
        self._calls: list[ToolCallDelta] = []
        self._generated: list[int] = []
        self._started = time.perf_counter_ns()
        self._first_output: int | None = None

    def step(self, out: RequestOutput, first: bool) -> dict[str, Any]:
        """The line for one engine output (the last one carries done, the reason, the calls and the timings)."""
        if self._first_output is None:
            self._first_output = time.perf_counter_ns()
        self._generated += out.token_ids
        text, logprobs = self._choice.content(out, first)
        content, thinking = text, ""
        if self._parser is not None:
            deltas = self._parser.step(text, out.finished)
            content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
            thinking = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
            self._calls += [d for d in deltas if isinstance(d, ToolCallDelta)]
        line = self._body(content, thinking)
        if logprobs is not None:
            line["logprobs"] = [_token_logprob(entry) for entry in logprobs.get("content") or []]
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
            "prompt_eval_count": len(self._choice.prompt_ids), "prompt_eval_duration": first - self._started,
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


def _token_logprob(entry: dict[str, Any]) -> dict[str, Any]:
    out = {"token": entry["token"], "logprob": entry["logprob"], "bytes": entry.get("bytes")}
    out["top_logprobs"] = [{"token": t["token"], "logprob": t["logprob"], "bytes": t.get("bytes")}
                           for t in entry.get("top_logprobs") or []]
    return out
