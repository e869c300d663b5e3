"""One reply's generated text -> thinking, answer text and tool calls, incrementally: the one reader of a
model's output that every API face uses (chat completions, Responses, Messages, Ollama).

The thinking comes first (edgeopt.server.chat.reasoning.parser); the answer that follows it is read for tool
calls in the model's own syntax (edgeopt.server.chat.tools.parser), so a call the model only considers in its
thinking is never taken for a call. Each face turns the deltas into its own wire shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeopt.server.chat.reasoning.parser import ReasoningDelta, ReasoningParser
from edgeopt.server.chat.reasoning.syntax import ReasoningSyntax
from edgeopt.server.chat.tools.deltas import ContentDelta, ToolCallDelta, collect
from edgeopt.server.chat.tools.parser import ToolCallParser
from edgeopt.server.chat.tools.plan import ToolPlan

ReplyDelta = ReasoningDelta | ContentDelta | ToolCallDelta


@dataclass(frozen=True)
class ReasoningStart:
    """How this request's reply begins: the syntax, and whether the prompt left a thinking block open."""

    syntax: ReasoningSyntax
    inside: bool


class ReplyParser:
    def __init__(self, tools: ToolCallParser | None = None, reasoning: ReasoningStart | None = None) -> None:
        """``tools``: None when the reply is not read for calls; ``reasoning``: None when the model does not think."""
        self._tools = tools
        self._reasoning = None if reasoning is None else ReasoningParser(reasoning.syntax, reasoning.inside)

    @classmethod
    def for_reply(cls, tools: ToolPlan | None, reasoning: ReasoningStart | None) -> ReplyParser:
        """A fresh reader of one reply (it keeps state): its calls read in the planned syntax, one call at most
        unless parallel calls were allowed."""
        parser = None if tools is None else ToolCallParser(tools.syntax, max_calls=None if tools.parallel else 1)
        return cls(parser, reasoning)

    @property
    def calls(self) -> int:
        """Tool calls read so far."""
        return 0 if self._tools is None else self._tools.calls

    def feed(self, text: str) -> list[ReplyDelta]:
        split = self._reasoning.feed(text) if self._reasoning is not None else [ContentDelta(text)]
        return self._read_calls(split, finished=False)

    def finish(self) -> list[ReplyDelta]:
        """The output ended: everything held back is decided now."""
        split = self._reasoning.finish() if self._reasoning is not None else []
        return self._read_calls(split, finished=True)

    def step(self, text: str, finished: bool) -> list[ReplyDelta]:
        """``feed`` then, on the last output, ``finish``."""
        deltas = self.feed(text)
        return deltas + self.finish() if finished else deltas

    def _read_calls(self, split: list[ReasoningDelta | ContentDelta], finished: bool) -> list[ReplyDelta]:
        out: list[ReplyDelta] = []
        for delta in split:
            if isinstance(delta, ContentDelta) and self._tools is not None:
                out += self._tools.feed(delta.text)
            elif delta.text:
                out.append(delta)
        if finished and self._tools is not None:
            out += self._tools.finish()
        return out


@dataclass
class Reply:
    """A whole reply: its thinking, its answer text and its calls (OpenAI ``tool_calls`` objects)."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def collect_reply(deltas: list[ReplyDelta]) -> Reply:
    content, calls = collect([d for d in deltas if not isinstance(d, ReasoningDelta)])
    return Reply("".join(d.text for d in deltas if isinstance(d, ReasoningDelta)), content, calls)
