"""A chat choice's generated text -> OpenAI ``content``, ``reasoning_content`` and ``tool_calls``, output by
output (the reply is read by edgeopt.server.chat.reply, as on every API face).

Streaming chunks carry ``delta.tool_calls`` as OpenAI sends them: a call's first delta holds its index,
id, type and name (arguments ""), later ones pieces of its arguments. Thinking goes out as
``delta.reasoning_content`` (llama-server's name) and ``delta.reasoning`` (vLLM's and Ollama's): clients
read one or the other. The non-streaming message is the same parser fed the whole text, so the two never
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeopt.server.chat.reasoning.parser import ReasoningDelta
from edgeopt.server.chat.reply import Reply, ReplyParser, collect_reply
from edgeopt.server.chat.tools.deltas import ContentDelta, ToolCallDelta


@dataclass(frozen=True)
class ChatStep:
    """What one output adds to the message."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class ChatOutput:
    def __init__(self, parser: ReplyParser) -> None:
        self._parser = parser

    def stream_step(self, text: str, finished: bool) -> ChatStep:
        """Content, reasoning and ``delta.tool_calls`` entries for one output's text."""
        deltas = self._parser.step(text, finished)
        return ChatStep("".join(d.text for d in deltas if isinstance(d, ContentDelta)),
                        "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)),
                        _chunk_tool_calls([d for d in deltas if isinstance(d, ToolCallDelta)]))

    def whole(self, text: str) -> Reply:
        return collect_reply(self._parser.step(text, finished=True))

    def finish_reason(self, engine_reason: str | None) -> str | None:
        return "tool_calls" if self._parser.calls and engine_reason == "stop" else engine_reason


def _chunk_tool_calls(deltas: list[ToolCallDelta]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for delta in deltas:
        if delta.name is None and entries and entries[-1]["index"] == delta.index:
            entries[-1]["function"]["arguments"] += delta.arguments  # one entry per call per chunk
        elif delta.name is None:
            entries.append({"index": delta.index, "function": {"arguments": delta.arguments}})
        else:
            entries.append({"index": delta.index, "id": delta.id, "type": "function",
                            "function": {"name": delta.name, "arguments": delta.arguments}})
    return entries
