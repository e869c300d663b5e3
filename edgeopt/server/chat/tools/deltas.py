"""What reading a reply for tool calls yields: content text, and each call's pieces as they are read (its id and
name first, then its arguments); and the whole message those pieces make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments: str = ""
    id: str | None = None  # with name: the first delta of a call
    name: str | None = None


Delta = ContentDelta | ToolCallDelta


@dataclass
class CallBeingRead:
    """The parser's state of the call it is reading."""

    index: int
    raw: str = ""  # everything consumed for this call, given back as content if it is no call after all
    name: str | None = None
    arguments_key: str | None = None
    arguments_is_string: bool = False  # '"arguments": "{...}"': decoded once complete
    held_arguments: list[str] = field(default_factory=list)  # arguments written before the name


def collect(deltas: list[Delta]) -> tuple[str, list[dict[str, Any]]]:
    """The whole message: content text and OpenAI ``tool_calls`` objects."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            content.append(delta.text)
        elif delta.name is not None:
            calls[delta.index] = {"id": delta.id, "type": "function",
                                  "function": {"name": delta.name, "arguments": delta.arguments}}
        else:
            calls[delta.index]["function"]["arguments"] += delta.arguments
    return "".join(content), [calls[i] for i in sorted(calls)]
