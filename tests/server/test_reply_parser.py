"""The reply reader every API face uses: thinking, answer and tool calls, from llama.cpp's real templates.

As for the tool-call parser (test_tool_parser.py), every output is fed split at every boundary (and every
pair of boundaries, and character by character): thinking, answer and calls must come out the same as
when fed whole, and no delta may be empty.
"""

from __future__ import annotations

import pytest

from edgeopt.server.chat.reasoning.parser import ReasoningDelta
from edgeopt.server.chat.reasoning.syntax import (
    ReasoningSyntax,
    detect_reasoning_syntax,
    reasoning_format,
)
from edgeopt.server.chat.reply import (
    ReasoningStart,
    ReplyDelta,
    ReplyParser,
    collect_reply,
)
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.chat.tools.deltas import ToolCallDelta
from edgeopt.server.chat.tools.parser import ToolCallParser
from edgeopt.server.chat.tools.syntax import detect_tool_syntax
from tests.exporters.reference_converter import reference_chat_template

QWEN3 = "Qwen-Qwen3-0.6B"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# name -> (model output, starts inside thinking, with tools, expected reasoning, content, calls)
CASES: dict[str, tuple[str, bool, bool, str, str, list[tuple[str, str]]]] = {
    "think-then-answer": ("<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello there!", False, False,
                          "The user greets me.\nI greet back.", "Hello there!", []),
    "think-then-call": (f"<think>\nI could write {CALL} but first: </think>\n\n{CALL}", False, True,
                        f"I could write {CALL} but first:", "", [("get_weather", '{"city": "Paris"}')]),
    "think-answer-and-call": (f"<think>hm</think>Let me look.\n{CALL}", False, True, "hm", "Let me look.",
                              [("get_weather", '{"city": "Paris"}')]),
    "prompt-opened-thinking": ("so 2+2 is 4 </think>\n\nIt is 4.", True, False, "so 2+2 is 4", "It is 4.", []),
    "no-thinking": ("Just an answer; <think> later is text </think>.", False, True,
                    "", "Just an answer; <think> later is text </think>.", []),
    "empty-thinking": ("<think>\n\n</think>\n\nOK", False, False, "", "OK", []),
    "cut-off-thinking": ("<think>\nStill thinking about </thi", False, False, "Still thinking about </thi", "", []),
    "partial-marker-only": ("  <thi", False, False, "", "  <thi", []),
    "cut-off-after-close": ("<think>done</think>\n\n", False, False, "done", "", []),
}


def _start(inside: bool) -> ReasoningStart:
    syntax = detect_reasoning_syntax(reference_chat_template(QWEN3))
    assert syntax is not None
    return ReasoningStart(syntax, inside)


def _run(case: str, pieces: list[str]) -> list[ReplyDelta]:
    _, inside, tools, *_ = CASES[case]
    calls = ToolCallParser(detect_tool_syntax(reference_chat_template(QWEN3))) if tools else None
    parser = ReplyParser(calls, _start(inside))
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    return deltas + parser.finish()


def _summary(deltas: list[ReplyDelta]) -> tuple[str, str, list[tuple[str, str]]]:
    assert all(d.text for d in deltas if not isinstance(d, ToolCallDelta)), deltas  # no empty pieces
    reply = collect_reply(deltas)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls]
    return reply.reasoning, reply.content, calls


@pytest.mark.parametrize("case", CASES)
def test_every_split_gives_the_whole_reply(case: str) -> None:
    text, _, _, reasoning, content, calls = CASES[case]
    expected = (reasoning, content, calls)
    assert _summary(_run(case, [text])) == expected
    for i in range(len(text) + 1):
        assert _summary(_run(case, [text[:i], text[i:]])) == expected, f"split at {i}: {text[:i]!r} | {text[i:]!r}"
    assert _summary(_run(case, list(text))) == expected


@pytest.mark.parametrize("case", ["think-then-call", "prompt-opened-thinking"])
def test_every_pair_of_splits_gives_the_whole_reply(case: str) -> None:
    text = CASES[case][0][:90]
    whole = _summary(_run(case, [text]))
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert _summary(_run(case, [text[:i], text[i:j], text[j:]])) == whole, (i, j)


def test_thinking_streams_before_the_reply_ends() -> None:
    """Thinking goes out as it is written (not held until </think>), so a client sees the model work."""
    parser = ReplyParser(None, _start(False))
    assert parser.feed("<think>\nFirst") == [ReasoningDelta("First")]
    assert parser.feed(" idea\n") == [ReasoningDelta(" idea")]  # the newline may still lay out </think>
    assert parser.feed("more") == [ReasoningDelta("\nmore")]


@pytest.mark.parametrize("template, switch", [(QWEN3, True), ("Qwen-QwQ-32B", True),
                                              ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", True),
                                              ("llama-cpp-deepseek-r1", False)])
def test_thinking_templates_are_detected_from_their_text(template: str, switch: bool) -> None:
    assert detect_reasoning_syntax(reference_chat_template(template)) == ReasoningSyntax("<think>", "</think>", switch)


@pytest.mark.parametrize("template", ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct"])
def test_templates_that_do_not_think_are_not_read_for_thinking(template: str) -> None:
    assert detect_reasoning_syntax(reference_chat_template(template)) is None


def test_where_the_reply_starts_follows_the_generation_prompt() -> None:
    """Qwen3 opens <think> itself unless enable_thinking=false closes an empty block in the prompt; the
    llama.cpp R1 template opens the block in the prompt; the R1 distill's opens it only when asked to think."""
    qwen3 = reasoning_format(ChatTemplate(reference_chat_template(QWEN3)))
    assert qwen3 is not None
    assert not qwen3.reply_starts_in_reasoning({})
    assert not qwen3.reply_starts_in_reasoning({"enable_thinking": False})
    r1 = reasoning_format(ChatTemplate(reference_chat_template("llama-cpp-deepseek-r1")))
    assert r1 is not None and r1.reply_starts_in_reasoning({})
    distill = reasoning_format(ChatTemplate(reference_chat_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")))
    assert distill is not None and distill.reply_starts_in_reasoning({"enable_thinking": True})
    assert not distill.reply_starts_in_reasoning({"enable_thinking": False})
