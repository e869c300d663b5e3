"""A thinking model's output text -> reasoning and answer, incrementally, in one pass.

Fed the text as the engine produces it, the parser returns :class:`ReasoningDelta` pieces for the
thinking and :class:`ContentDelta` pieces for the answer. Only the start of a reply may open a thinking
block (Qwen3 and R1 think first, then answer), so ``<think>`` written later in an answer stays text. A
marker split across pieces (``</thi`` at the end of one) is held back until it is decided; so is the
whitespace that lays out the block (after ``<think>``, before and after ``</think>``), which is neither
thinking nor answer. Whole replies feed the whole text to the same parser, so both always agree.

A reply cut off before ``</think>`` (max_tokens) is all reasoning: the model never got to its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.server.chat.reasoning.syntax import ReasoningSyntax
from edgeopt.server.chat.tools.deltas import ContentDelta
from edgeopt.server.chat.tools.json_scan import WHITESPACE, held_prefix_length


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


class ReasoningParser:
    def __init__(self, syntax: ReasoningSyntax, starts_in_reasoning: bool) -> None:
        """``starts_in_reasoning``: the prompt left a thinking block open (ReasoningFormat says)."""
        self._syntax = syntax
        self._state = "reasoning_start" if starts_in_reasoning else "start"
        self._pending = ""
        self._out: list[ReasoningDelta | ContentDelta] = []
        self._handlers = {"start": self._on_start, "reasoning_start": self._on_reasoning_start,
                          "reasoning": self._on_reasoning, "answer_start": self._on_answer_start,
                          "answer": self._on_answer}

    def feed(self, text: str) -> list[ReasoningDelta | ContentDelta]:
        self._pending += text
        while self._pending and self._handlers[self._state]():
            pass
        return self._take()

    def finish(self) -> list[ReasoningDelta | ContentDelta]:
        """The output ended: held text is decided now (a partial marker is what it says, as written)."""
        if self._state == "start":
            self._emit(ContentDelta(self._pending))
        elif self._state == "reasoning":
            self._emit(ReasoningDelta(self._pending.rstrip(WHITESPACE)))
        self._pending = ""
        return self._take()

    # -- states: each consumes what it can of self._pending; True when another state should run now --

    def _on_start(self) -> bool:
        """Undecided: a reply that opens with the marker (after whitespace) thinks first."""
        stripped = self._pending.lstrip(WHITESPACE)
        marker = self._syntax.open_marker
        if stripped.startswith(marker):
            self._pending = stripped[len(marker):]
            self._state = "reasoning_start"
            return True
        if marker.startswith(stripped):
            return False  # whitespace, or the beginning of the marker: wait for more
        self._state = "answer"
        return True

    def _on_reasoning_start(self) -> bool:
        self._pending = self._pending.lstrip(WHITESPACE)
        if not self._pending:
            return False
        self._state = "reasoning"
        return True

    def _on_reasoning(self) -> bool:
        marker = self._syntax.close_marker
        at = self._pending.find(marker)
        if at >= 0:
            self._emit(ReasoningDelta(self._pending[:at].rstrip(WHITESPACE)))
            self._pending = self._pending[at + len(marker):]
            self._state = "answer_start"
            return True
        keep = held_prefix_length(self._pending, marker)
        decided = self._pending[:len(self._pending) - keep].rstrip(WHITESPACE)
        self._emit(ReasoningDelta(decided))
        self._pending = self._pending[len(decided):]
        return False

    def _on_answer_start(self) -> bool:
        self._pending = self._pending.lstrip(WHITESPACE)
        if not self._pending:
            return False
        self._state = "answer"
        return True

    def _on_answer(self) -> bool:
        self._emit(ContentDelta(self._pending))
        self._pending = ""
        return False

    def _emit(self, delta: ReasoningDelta | ContentDelta) -> None:
        if delta.text:
            self._out.append(delta)

    def _take(self) -> list[ReasoningDelta | ContentDelta]:
        out, self._out = self._out, []
        return out

