"""A reply's deltas (edgeopt.server.chat.reply) -> Anthropic's message object and its stream events.

Content blocks follow the reply's order: ``thinking`` (what the model thought), ``text`` (its answer),
``tool_use`` (one per call). Streaming opens a block when the first delta of its kind arrives and closes
the open one first, so indexes increase and exactly one block is open at a time, as Anthropic streams:
``content_block_start`` / ``content_block_delta`` (``thinking_delta``, ``text_delta``, ``input_json_delta``)
/ ``content_block_stop``, between ``message_start`` (+ ``ping``) and ``message_delta`` (stop_reason and
usage) + ``message_stop``.

Usage follows Anthropic's split: ``input_tokens`` are the prompt tokens computed for this request,
``cache_read_input_tokens`` those the prefix cache served; their sum is the prompt's length, which
/v1/messages/count_tokens returns.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from edgeopt.engine.api import RequestOutput
from edgeopt.server.chat.reasoning.parser import ReasoningDelta
from edgeopt.server.chat.reply import ReplyDelta
from edgeopt.server.chat.tools.deltas import ContentDelta, ToolCallDelta

Event = tuple[str, dict[str, Any]]  # (event name, data)


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def message_usage(prompt_tokens: int, out: RequestOutput) -> dict[str, int]:
    return {"input_tokens": prompt_tokens - out.cached_tokens, "output_tokens": out.completion_tokens,
            "cache_read_input_tokens": out.cached_tokens, "cache_creation_input_tokens": 0}


def stop_reason(out: RequestOutput, calls: int, window_bound: bool = False) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence): the output limit wins (a call cut off is no finished call).
    ``window_bound``: the context, not max_tokens, limited the output."""
    if out.finish_reason == "length":
        return ("model_context_window_exceeded" if window_bound else "max_tokens"), None
    if calls:
        return "tool_use", None
    if out.stop_string is not None:
        return "stop_sequence", out.stop_string
    return "end_turn", None


class MessageBuilder:
    def __init__(self, model: str, prompt_tokens: int, show_thinking: bool = True, window_bound: bool = False,
                 message_id: str | None = None) -> None:
        """``show_thinking`` False (``thinking.display="omitted"``): thinking blocks come back empty;
        ``window_bound``: max_tokens was more than the context leaves (a length stop is the window's)."""
        self.message_id = message_id or new_message_id()
        self.model = model
        self.prompt_tokens = prompt_tokens
        self._show_thinking = show_thinking
        self.blocks: list[dict[str, Any]] = []
        self._arguments: list[str] = []  # per block: a tool_use's arguments text so far
        self._open = False
        self._calls = 0
        self._window_bound = window_bound

    # -- the whole message --------------------------------------------------------------------------

    def message(self, out: RequestOutput, content: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        reason, sequence = stop_reason(out, self._calls, self._window_bound)
        return {"id": self.message_id, "type": "message", "role": "assistant", "model": self.model,
                "content": self.final_blocks() if content is None else content, "stop_reason": reason,
                "stop_sequence": sequence, "usage": message_usage(self.prompt_tokens, out)}

    def final_blocks(self) -> list[dict[str, Any]]:
        """The blocks with each tool_use's arguments decoded into its ``input`` (a call the output limit
        cut off, whose arguments are no JSON object, has input {}: its stop_reason says max_tokens)."""
        blocks = []
        for block, arguments in zip(self.blocks, self._arguments):
            if block["type"] == "tool_use":
                block = {**block, "input": _decoded_object(arguments)}
            blocks.append(block)
        return blocks

    # -- events -------------------------------------------------------------------------------------

    def start(self, first: RequestOutput) -> list[Event]:
        """``message_start`` (usage as known once the prompt is admitted: cached tokens included) and a ping."""
        empty = RequestOutput(first.request_id, "", [], cached_tokens=first.cached_tokens)
        return [("message_start", {"type": "message_start", "message": self.message(empty, content=[])}),
                ("ping", {"type": "ping"})]

    def step(self, deltas: list[ReplyDelta]) -> list[Event]:
        events: list[Event] = []
        for delta in deltas:
            if isinstance(delta, ReasoningDelta):
                events += self._into("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                if self._show_thinking:
                    self.blocks[-1]["thinking"] += delta.text
                    events.append(self._delta({"type": "thinking_delta", "thinking": delta.text}))
            elif isinstance(delta, ContentDelta):
                events += self._into("text", {"type": "text", "text": ""})
                self.blocks[-1]["text"] += delta.text
                events.append(self._delta({"type": "text_delta", "text": delta.text}))
            elif isinstance(delta, ToolCallDelta):
                if delta.name is not None:
                    events += self._close()
                    events += self._open_block({"type": "tool_use", "id": delta.id, "name": delta.name, "input": {}})
                    self._calls += 1
                if delta.arguments:
                    self._arguments[-1] += delta.arguments
                    events.append(self._delta({"type": "input_json_delta", "partial_json": delta.arguments}))
        return events

    def finish(self, out: RequestOutput) -> list[Event]:
        reason, sequence = stop_reason(out, self._calls, self._window_bound)
        return [*self._close(),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                   "usage": message_usage(self.prompt_tokens, out)}),
                ("message_stop", {"type": "message_stop"})]

    def _into(self, kind: str, block: dict[str, Any]) -> list[Event]:
        """Make sure the open block is of ``kind`` (closing another, opening a new one)."""
        if self._open and self.blocks[-1]["type"] == kind:
            return []
        return [*self._close(), *self._open_block(block)]

    def _open_block(self, block: dict[str, Any]) -> list[Event]:
        self.blocks.append(block)
        self._arguments.append("")
        self._open = True
        return [("content_block_start", {"type": "content_block_start", "index": len(self.blocks) - 1,
                                         "content_block": dict(block)})]

    def _close(self) -> list[Event]:
        if not self._open:
            return []
        self._open = False
        return [("content_block_stop", {"type": "content_block_stop", "index": len(self.blocks) - 1})]

    def _delta(self, delta: dict[str, Any]) -> Event:
        return ("content_block_delta", {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta})


def _decoded_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def sse_event(event: Event) -> bytes:
    name, data = event
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n".encode()
