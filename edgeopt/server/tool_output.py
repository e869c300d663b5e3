"""A chat choice's generated text -> OpenAI ``content`` and ``tool_calls``, output by output.

Streaming chunks carry ``delta.tool_calls`` as OpenAI sends them: a call's first delta holds its index,
id, type and name (arguments ""), later ones pieces of its arguments. The non-streaming message is the
same parser fed the whole text, so the two never disagree.
"""

from __future__ import annotations

from typing import Any

from edgeopt.server.tool_parser import ContentDelta, Delta, ToolCallDelta, collect
from edgeopt.server.tool_request import ToolPlan


class ToolCallOutput:
    def __init__(self, plan: ToolPlan) -> None:
        self._parser = plan.parser()

    def stream_step(self, text: str, finished: bool) -> tuple[str, list[dict[str, Any]]]:
        """Content text and ``delta.tool_calls`` entries for one output's text."""
        deltas = self.deltas(text, finished)
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        return content, _chunk_tool_calls([d for d in deltas if isinstance(d, ToolCallDelta)])

    def whole(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """The message's content (None when it only calls tools) and its ``tool_calls``."""
        content, calls = collect(self.deltas(text, finished=True))
        return (content or None) if calls else content, calls

    def finish_reason(self, engine_reason: str | None) -> str | None:
        return "tool_calls" if self._parser.calls and engine_reason == "stop" else engine_reason

    def deltas(self, text: str, finished: bool) -> list[Delta]:
        """The parser's content and call deltas for one output's text (the Responses API shapes its own)."""
        deltas = self._parser.feed(text)
        return deltas + self._parser.finish() if finished else deltas


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
