"""The tool-call parser per family, the family detected from llama.cpp's real templates.

Every output is fed split at every byte boundary (and at every pair of boundaries, and character by
character): the content and calls must come out the same as when fed whole, a call's name must come
before any of its arguments, and text that is not a call must stay content, exactly as written.
"""

from __future__ import annotations

import json

import pytest

from edgeopt.server.chat.tools.deltas import ContentDelta, Delta, ToolCallDelta, collect
from edgeopt.server.chat.tools.parser import ToolCallParser
from edgeopt.server.chat.tools.syntax import ToolFamily, ToolSyntax, detect_tool_syntax
from tests.exporters.reference_converter import reference_chat_template

ARGS = '{"city": "Par\\"is }", "days": [1, {"n": "]"}], "ok": true, "t": -1.5e3}'
# family -> (a template of that family, model output, expected content, expected calls (name, arguments))
CASES: dict[str, tuple[str, str, str, list[tuple[str, str]]]] = {
    "hermes": ("Qwen-Qwen2.5-7B-Instruct",
               f'Let me check.\n<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tool_call>\n'
               '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
               "Let me check.", [("get_weather", ARGS), ("now", "{}")]),
    "hermes-qwen3": ("Qwen-Qwen3-0.6B", f'<tool_call>\n{{"arguments": {ARGS}, "name": "get_weather"}}\n</tool_call>',
                     "", [("get_weather", ARGS)]),
    "hermes-3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                 '<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>', "", [("f", '{"a": 1}')]),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct", f' {{"name": "get_weather", "parameters": {ARGS}}}', "",
                 [("get_weather", ARGS)]),
    "llama3.1-python-tag": ("meta-llama-Llama-3.1-8B-Instruct",
                            '<|python_tag|>{"name": "f", "parameters": {"x": 1}}', "", [("f", '{"x": 1}')]),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct",
                 '{"name": "f", "parameters": {"x": 1}}; {"name": "g", "parameters": {}}', "",
                 [("f", '{"x": 1}'), ("g", "{}")]),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407",
                     f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {ARGS}, "id": "a1b2c3d4e"}}, '
                     '{"name": "now", "arguments": {}}]', "", [("get_weather", ARGS), ("now", "{}")]),
    "mistral-nemo-control-token": ("mistralai-Mistral-Nemo-Instruct-2407",  # the marker is not in the text
                                   '[{"name": "now", "arguments": {}}]', "", [("now", "{}")]),
    "mistral-small": ("Mistral-Small-3.2-24B-Instruct-2506",
                      f'[TOOL_CALLS]get_weather[ARGS]{ARGS}[TOOL_CALLS]now[ARGS]{{}}', "",
                      [("get_weather", ARGS), ("now", "{}")]),
    "generic": ("google-gemma-2-2b-it", f'{{"name": "get_weather", "arguments": {ARGS}}}', "",
                [("get_weather", ARGS)]),
}
FAMILIES = {"hermes": ToolFamily.HERMES, "hermes-qwen3": ToolFamily.HERMES, "hermes-3": ToolFamily.HERMES,
            "llama3.1": ToolFamily.LLAMA3, "llama3.1-python-tag": ToolFamily.LLAMA3, "llama3.2": ToolFamily.LLAMA3,
            "mistral-nemo": ToolFamily.MISTRAL, "mistral-nemo-control-token": ToolFamily.MISTRAL,
            "mistral-small": ToolFamily.MISTRAL_ARGS,
            "generic": ToolFamily.GENERIC}


def _syntax(case: str) -> ToolSyntax:
    return detect_tool_syntax(reference_chat_template(CASES[case][0]))


def _run(syntax: ToolSyntax, pieces: list[str], max_calls: int | None = None) -> list[Delta]:
    parser = ToolCallParser(syntax, max_calls)
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    return deltas + parser.finish()


def _summary(deltas: list[Delta]) -> tuple[str, list[tuple[str, str]]]:
    content, calls = collect(deltas)
    return content, [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def _check_order(deltas: list[Delta]) -> None:
    """Each call: one first delta with id and name, then only argument pieces."""
    named: set[int] = set()
    for delta in deltas:
        if isinstance(delta, ToolCallDelta):
            if delta.name is not None:
                assert delta.index not in named and delta.id and delta.arguments == ""
                named.add(delta.index)
            else:
                assert delta.index in named and delta.arguments


@pytest.mark.parametrize("case", CASES)
def test_family_is_detected_from_the_template_text(case: str) -> None:
    assert _syntax(case).family == FAMILIES[case]


@pytest.mark.parametrize("case", CASES)
def test_every_split_gives_the_whole_output(case: str) -> None:
    _, text, content, calls = CASES[case]
    syntax = _syntax(case)
    assert _summary(_run(syntax, [text])) == (content, calls)
    for i in range(len(text) + 1):
        deltas = _run(syntax, [text[:i], text[i:]])
        assert _summary(deltas) == (content, calls), f"split at {i}: {text[:i]!r} | {text[i:]!r}"
        _check_order(deltas)
    by_char = _run(syntax, list(text))
    assert _summary(by_char) == (content, calls)
    _check_order(by_char)
    if case != "hermes-3":  # arguments written as a JSON string are sent once decoded, in one piece
        assert sum(1 for d in by_char if isinstance(d, ToolCallDelta) and d.name is None) > len(calls)


@pytest.mark.parametrize("case", ["hermes", "llama3.2", "mistral-small"])
def test_every_pair_of_splits_gives_the_whole_output(case: str) -> None:
    _, text, content, calls = CASES[case]
    syntax = _syntax(case)
    text = text[:120]  # long enough to hold a marker, a name and arguments; all pairs stay fast
    whole = _summary(_run(syntax, [text]))
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert _summary(_run(syntax, [text[:i], text[i:j], text[j:]])) == whole, (i, j)


@pytest.mark.parametrize("text", [
    "Plain answer with <tool_call in the middle and a < at the end <",
    "<tool_call>\nnot json at all\n</tool_call> then more",
    '<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>',  # no name: no call
    '<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>',
])
def test_text_that_is_no_call_stays_content_exactly(text: str) -> None:
    syntax = _syntax("hermes")
    for i in range(len(text) + 1):
        deltas = _run(syntax, [text[:i], text[i:]])
        assert all(isinstance(d, ContentDelta) for d in deltas)
        assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == text


def test_json_families_read_a_call_only_at_the_start() -> None:
    text = 'The JSON is {"name": "f", "parameters": {}}'
    assert _summary(_run(_syntax("llama3.1"), [text])) == (text, [])
    for text in ("[1] is a footnote", "[ ]", "[", " \n "):
        assert _summary(_run(_syntax("mistral-nemo"), list(text))) == (text, [])


def test_a_call_cut_off_keeps_its_name_and_what_was_written() -> None:
    deltas = _run(_syntax("hermes"), ['<tool_call>\n{"name": "f", "arguments": {"a": [1, '])
    assert _summary(deltas) == ("", [("f", '{"a": [1, ')])


def test_parallel_tool_calls_false_keeps_only_the_first_call() -> None:
    _, text, _, calls = CASES["hermes"]
    assert _summary(_run(_syntax("hermes"), [text], max_calls=1))[1] == calls[:1]


def test_mistral_ids_are_nine_letters_and_digits() -> None:
    [first, *_] = [d for d in _run(_syntax("mistral-nemo"), [CASES["mistral-nemo"][1]]) if isinstance(d, ToolCallDelta)]
    assert first.id is not None and len(first.id) == 9 and first.id.isalnum()
    json.loads(collect(_run(_syntax("hermes"), [CASES["hermes"][1]]))[1][0]["function"]["arguments"])
