"""Check a /v1/responses event stream against the official ``openai`` client's own types and OpenAI's order.

Every event is validated by the client's ``ResponseStreamEvent`` union (a missing or mistyped field fails),
``sequence_number`` counts up from 0, every output item is added before its deltas and done after them,
and the deltas add up to the done events and to the final response's items.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

EVENT = TypeAdapter(ResponseStreamEvent)
ENDS = ("response.completed", "response.incomplete", "response.failed")


def stream_events(url: str, body: dict[str, Any], timeout: float = 120) -> list[dict[str, Any]]:
    """POST a streaming request; the events as sent (the SSE ``event:`` name checked against ``type``)."""
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=timeout) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name, (name, event)
                events.append(event)
    return events


def check_events(events: list[dict[str, Any]]) -> Response:
    """Validate the sequence; return the final response, checked against what the deltas built."""
    parsed = [EVENT.validate_python(event) for event in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert [e.type for e in parsed[:2]] == ["response.created", "response.in_progress"]
    assert parsed[-1].type in ENDS and not any(e.type in ENDS for e in parsed[:-1])
    built: list[dict[str, Any]] = []  # item id, type, text or arguments from the deltas
    open_item: dict[str, Any] | None = None
    for event in parsed[2:-1]:
        kind = event.type
        if kind == "response.output_item.added":
            assert open_item is None, "an item was added while another was open"
            assert event.output_index == len(built)
            open_item = {"id": event.item.id, "type": event.item.type, "text": "", "parts": 0, "parts_done": 0}
            built.append(open_item)
            continue
        assert open_item is not None, f"{kind} outside an item"
        assert event.output_index == len(built) - 1
        if kind != "response.output_item.done":
            assert event.item_id == open_item["id"]
        if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
            open_item["parts"] += 1
        elif kind in ("response.output_text.delta", "response.function_call_arguments.delta",
                      "response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            open_item["text"] += event.delta
        elif kind in ("response.output_text.done", "response.reasoning_text.done",
                      "response.reasoning_summary_text.done"):
            assert event.text == open_item["text"]
        elif kind == "response.function_call_arguments.done":
            assert event.arguments == open_item["text"]
        elif kind in ("response.content_part.done", "response.reasoning_summary_part.done"):
            assert event.part.text == open_item["text"]
            open_item["parts_done"] += 1
        elif kind == "response.output_item.done":
            assert event.item.id == open_item["id"] and event.item.status in ("completed", "incomplete")
            assert open_item["parts"] == open_item["parts_done"]
            open_item = None
    assert open_item is None, "the response ended with an item still open"
    final = parsed[-1].response
    assert [item.id for item in final.output] == [item["id"] for item in built]
    for item, seen in zip(final.output, built):
        if item.type == "message":
            assert "".join(part.text for part in item.content) == seen["text"]
        elif item.type == "function_call":
            assert item.arguments == seen["text"]
        elif item.type == "reasoning":
            assert "".join(part.text for part in [*(item.content or []), *item.summary]) == seen["text"]
    return final
