"""The Responses API's output: the response object and its stream events, built from the parsed deltas.

One builder serves both replies: a stream sends every event as it is made; a non-streaming reply feeds
the whole text at once and returns only the final response object, so the two never disagree. Events
follow OpenAI's order: ``response.created``, ``response.in_progress``, then per output item
``output_item.added``, (message) ``content_part.added``, ``output_text.delta``..., ``output_text.done``,
``content_part.done``, or (function call) ``function_call_arguments.delta``..., ``.done``, or (a thinking
model's reasoning) ``reasoning_text.delta``... / ``reasoning_summary_text.delta``..., then
``output_item.done``; last ``response.completed`` / ``response.incomplete`` / ``response.failed``.
Every event has a ``sequence_number`` one above the last.

Reasoning: the model's whole thinking, as written (there is no summarizer). It goes in the reasoning
item's ``content`` (``reasoning_text`` parts, ``response.reasoning_text.*`` events), or, when the request
asks for a summary (``reasoning.summary``), in its ``summary`` (``summary_text`` parts,
``response.reasoning_summary_*`` events: what Home Assistant and Codex show). With include
``reasoning.encrypted_content`` it is also the item's ``encrypted_content`` (not encrypted: a client that
stores nothing sends it back and the next turn's template sees the thinking again).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from edgeopt.server.chat.reasoning.parser import ReasoningDelta
from edgeopt.server.chat.reply import ReplyDelta
from edgeopt.server.chat.tools.deltas import ContentDelta, ToolCallDelta
from edgeopt.server.responses.schema import ResponsesRequest

ENCRYPTED_INCLUDE = "reasoning.encrypted_content"

Event = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    def __init__(self, body: ResponsesRequest, response_id: str, logprobs: bool) -> None:
        self.id = response_id
        self._body = body
        self._created = time.time()
        self._logprobs = logprobs  # output_text parts carry logprobs (include "message.output_text.logprobs")
        # Where the thinking goes: the summary when one is asked for, else the reasoning item's content.
        self._summary = body.reasoning is not None and bool(body.reasoning.summary or body.reasoning.generate_summary)
        self._encrypted = ENCRYPTED_INCLUDE in (body.include or ())
        self._sequence = 0
        self.output: list[dict[str, Any]] = []  # items as they stand (the open one still growing)
        self._open: dict[str, Any] | None = None  # the item deltas currently go to
        self._call_index: int | None = None  # the parser's index of the open function call
        self.status = "in_progress"
        self._usage: dict[str, Any] | None = None
        self._incomplete: dict[str, str] | None = None
        self._error: dict[str, str] | None = None

    # -- events -----------------------------------------------------------------------------------------
    def start(self) -> list[Event]:
        return [self._event("response.created", response=self.response()),
                self._event("response.in_progress", response=self.response())]

    def step(self, deltas: list[ReplyDelta], logprobs: list[dict[str, Any]] | None = None) -> list[Event]:
        """Events for one output's deltas; ``logprobs``: its tokens' entries (text without tools only)."""
        events: list[Event] = []
        for delta in deltas:
            if isinstance(delta, ReasoningDelta) and delta.text:
                events += self._reasoning(delta.text)
            elif isinstance(delta, ContentDelta) and delta.text:
                events += self._text(delta.text, logprobs or [])
                logprobs = None  # one output's tokens go with its first text delta
            elif isinstance(delta, ToolCallDelta):
                events += self._call(delta)
        return events

    def finish(self, finish_reason: str | None, usage: dict[str, Any], error: str | None = None) -> list[Event]:
        """Close the open item and end the response: completed, incomplete (the length limit), or failed."""
        self._usage = usage
        if error is not None:
            self.status = "failed"
            self._error = {"code": "server_error", "message": error}
        elif finish_reason == "length":
            self.status = "incomplete"
            self._incomplete = {"reason": "max_output_tokens"}
        else:
            self.status = "completed"
        events = self._close()
        if not self.output and self.status != "failed":  # an empty answer is still one (empty) message
            events += self._open_message()
            events += self._close()
        kind = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}[self.status]
        return [*events, self._event(kind, response=self.response())]

    def _text(self, text: str, logprobs: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != "message":
            events += self._close()
            events += self._open_message()
        part = self._open["content"][0]
        part["text"] += text
        if self._logprobs:
            part["logprobs"] += logprobs
        events.append(self._event("response.output_text.delta", item_id=self._open["id"],
                                  output_index=len(self.output) - 1, content_index=0, delta=text,
                                  logprobs=logprobs if self._logprobs else []))
        return events

    def _reasoning(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != "reasoning":
            events += self._close()
            events += self._open_reasoning()
        item, index = self._open, len(self.output) - 1
        if self._summary:
            item["summary"][0]["text"] += text
            events.append(self._event("response.reasoning_summary_text.delta", item_id=item["id"],
                                      output_index=index, summary_index=0, delta=text))
        else:
            item["content"][0]["text"] += text
            events.append(self._event("response.reasoning_text.delta", item_id=item["id"], output_index=index,
                                      content_index=0, delta=text))
        return events

    def _open_reasoning(self) -> list[Event]:
        item: dict[str, Any] = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": []}
        if not self._summary:
            item["content"] = []
        self._open = item
        self.output.append(item)
        index = len(self.output) - 1
        events = [self._event("response.output_item.added", output_index=index, item=_copy(item))]
        if self._summary:
            part = {"type": "summary_text", "text": ""}
            item["summary"].append(part)
            events.append(self._event("response.reasoning_summary_part.added", item_id=item["id"],
                                      output_index=index, summary_index=0, part=dict(part)))
        else:
            part = {"type": "reasoning_text", "text": ""}
            item["content"].append(part)
            events.append(self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                      content_index=0, part=dict(part)))
        return events

    def reasoning_text(self) -> str:
        return "".join(part["text"] for item in self.output if item["type"] == "reasoning"
                       for part in [*item["summary"], *item.get("content", [])])

    def _call(self, delta: ToolCallDelta) -> list[Event]:
        events: list[Event] = []
        if delta.name is not None or self._call_index != delta.index:
            events += self._close()
            self._call_index = delta.index
            item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                    "call_id": delta.id or new_id("call"), "name": delta.name or "", "arguments": ""}
            self._open = item
            self.output.append(item)
            events.append(self._event("response.output_item.added", output_index=len(self.output) - 1,
                                      item=dict(item)))
        if delta.arguments:
            self._open["arguments"] += delta.arguments
            events.append(self._event("response.function_call_arguments.delta", item_id=self._open["id"],
                                      output_index=len(self.output) - 1, delta=delta.arguments))
        return events

    def _open_message(self) -> list[Event]:
        item = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                "content": []}
        self._open = item
        self.output.append(item)
        index = len(self.output) - 1
        part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
        if self._logprobs:
            part["logprobs"] = []
        events = [self._event("response.output_item.added", output_index=index, item=_copy(item))]
        item["content"].append(part)
        events.append(self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                  content_index=0, part=dict(part)))
        return events

    def _close(self) -> list[Event]:
        """Finish the open item: its done events, with its final state."""
        item, self._open, self._call_index = self._open, None, None
        if item is None:
            return []
        index = self.output.index(item)
        item["status"] = "incomplete" if self.status == "incomplete" else "completed"
        events: list[Event] = []
        if item["type"] == "reasoning":
            events += self._close_reasoning(item, index)
        elif item["type"] == "message":
            part = item["content"][0]
            events.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=part["text"], logprobs=part.get("logprobs", [])))
            events.append(self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                      content_index=0, part=dict(part)))
        else:
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=index, arguments=item["arguments"]))
        events.append(self._event("response.output_item.done", output_index=index, item=_copy(item)))
        return events

    def _close_reasoning(self, item: dict[str, Any], index: int) -> list[Event]:
        if self._encrypted:
            item["encrypted_content"] = "".join(p["text"] for p in [*item["summary"], *item.get("content", [])])
        if self._summary:
            part = item["summary"][0]
            return [self._event("response.reasoning_summary_text.done", item_id=item["id"], output_index=index,
                                summary_index=0, text=part["text"]),
                    self._event("response.reasoning_summary_part.done", item_id=item["id"], output_index=index,
                                summary_index=0, part=dict(part))]
        part = item["content"][0]
        return [self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                            content_index=0, text=part["text"]),
                self._event("response.content_part.done", item_id=item["id"], output_index=index,
                            content_index=0, part=dict(part))]

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    # -- the response object ----------------------------------------------------------------------------
    def response(self) -> dict[str, Any]:
        body = self._body
        text_format = body.text.format if body.text is not None and body.text.format is not None else None
        reasoning = body.reasoning
        return {
            "id": self.id, "object": "response", "created_at": self._created, "status": self.status,
            "background": False, "error": self._error, "incomplete_details": self._incomplete,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": body.model,
            "output": [_copy(item) for item in self.output], "parallel_tool_calls": body.parallel_tool_calls,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": reasoning.effort if reasoning else None,
                          "summary": reasoning.summary if reasoning else None},
            "store": body.store,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "text": {"format": text_format.model_dump(by_alias=True, exclude_none=True) if text_format
                     else {"type": "text"}},
            "tool_choice": _tool_choice(body), "tools": [t.model_dump() for t in body.tools or []],
            "top_logprobs": body.top_logprobs, "truncation": "disabled", "usage": self._usage,
            "user": body.user, "metadata": body.metadata or {},
        }

    def output_text(self) -> str:
        return "".join(part["text"] for item in self.output if item["type"] == "message"
                       for part in item["content"])


def _tool_choice(body: ResponsesRequest) -> Any:
    choice = body.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump()


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of an item (its content parts are copied too: the open item keeps growing)."""
    snapshot = dict(item)
    for parts in ("content", "summary"):
        if parts in snapshot:
            snapshot[parts] = [dict(part) for part in snapshot[parts]]
    return snapshot


def response_usage(prompt_tokens: int, output_tokens: int, cached_tokens: int,
                   reasoning_tokens: int = 0) -> dict[str, Any]:
    """``cache_write_tokens``: 0, since the prefix cache's writes are not counted per request."""
    return {"input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + output_tokens}
