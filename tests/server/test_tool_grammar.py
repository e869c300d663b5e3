"""The grammar that enforces ``tool_choice="required"`` / a named function, per family.

Compiled by the engine's GrammarCompiler over the fake runtime's byte vocabulary (token = byte), so a
text is accepted exactly when the constrained decoder could have written it, byte by byte.
"""

from __future__ import annotations

import pytest

from edgeopt.engine.grammar import Grammar, GrammarCompiler
from edgeopt.server.chat.request import Function
from edgeopt.server.chat.tools.grammar import tool_call_grammar
from edgeopt.server.chat.tools.plan import ToolPlan
from edgeopt.server.chat.tools.syntax import detect_tool_syntax
from tests.exporters.reference_converter import reference_chat_template
from tests.fixtures.fake_runtime import EOS_ID, FakeRuntime

WEATHER = Function(name="get_weather", parameters={
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 5}, "at": {"$ref": "#/$defs/hour"}},
    "required": ["city", "at"], "additionalProperties": False,
    "$defs": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}}})
NOW = Function(name="now")
GOOD_ARGS = '{"city": "Paris", "at": 7}'


def _grammar(template: str, forced: tuple[Function, ...], parallel: bool = True) -> Grammar:
    runtime = FakeRuntime()
    plan = ToolPlan(detect_tool_syntax(reference_chat_template(template)), (WEATHER, NOW), forced, parallel)
    return GrammarCompiler(runtime.tokenizer, runtime.info).compile(tool_call_grammar(plan, {}))


def _accepts(grammar: Grammar, text: str) -> bool:
    matcher = grammar.new_matcher()
    return all(matcher.consume_token(b) for b in text.encode()) and matcher.consume_token(EOS_ID)


@pytest.mark.parametrize(("template", "good", "bad"), [
    ("Qwen-Qwen2.5-7B-Instruct", f'<tool_call>\n{{"name": "get_weather", "arguments": {GOOD_ARGS}}}\n</tool_call>',
     ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',  # "at" missing
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris!", "at": 7}}\n</tool_call>',
      '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>', f"Sure. {GOOD_ARGS}"]),
    ("meta-llama-Llama-3.1-8B-Instruct", f'{{"name": "get_weather", "parameters": {GOOD_ARGS}}}',
     ['{"name": "get_weather", "arguments": {"city": "a", "at": 1}}', '{"name": "get_weather", "parameters": '
      '{"city": "a", "at": 24}}']),
    ("mistralai-Mistral-Nemo-Instruct-2407", f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {GOOD_ARGS}}}]',
     ['[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]']),
    ("Mistral-Small-3.2-24B-Instruct-2506", f"[TOOL_CALLS]get_weather[ARGS]{GOOD_ARGS}",
     ['[TOOL_CALLS]get_weather[ARGS]{"city": 1, "at": 1}']),
])
def test_grammar_accepts_only_valid_calls_in_the_family_syntax(template: str, good: str, bad: list[str]) -> None:
    grammar = _grammar(template, (WEATHER, NOW))
    assert _accepts(grammar, good)
    for text in bad:
        assert not _accepts(grammar, text), text


def test_named_function_is_the_only_one_allowed() -> None:
    grammar = _grammar("Qwen-Qwen2.5-7B-Instruct", (NOW,))
    assert _accepts(grammar, '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    assert not _accepts(grammar, f'<tool_call>\n{{"name": "get_weather", "arguments": {GOOD_ARGS}}}\n</tool_call>')


def test_parallel_calls_only_when_allowed() -> None:
    two = ('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n'
           '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    assert _accepts(_grammar("Qwen-Qwen2.5-7B-Instruct", (NOW,), parallel=True), two)
    assert not _accepts(_grammar("Qwen-Qwen2.5-7B-Instruct", (NOW,), parallel=False), two)


def test_a_control_token_marker_is_named_by_its_id() -> None:
    plan = ToolPlan(detect_tool_syntax(reference_chat_template("mistralai-Mistral-Nemo-Instruct-2407")),
                    (NOW,), (NOW,), False)
    assert tool_call_grammar(plan, {"[TOOL_CALLS]": 5}).source.count("<[5]>") == 1
