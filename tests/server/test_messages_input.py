"""Anthropic Messages bodies -> the chat request the chat path runs (edgeopt.server.anthropic.translate)."""

from __future__ import annotations

import json

import pytest

from edgeopt.errors import RequestError
from edgeopt.server.anthropic.schema import CountTokensRequest, MessagesRequest
from edgeopt.server.anthropic.translate import translate
from edgeopt.server.chat.decisions import decide
from edgeopt.server.chat.request import NamedTool, OutputFormat, Sampling
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.state import ServedModel
from tests.exporters.reference_converter import reference_chat_template

TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {
    "city": {"type": "string"}}}}


def _request(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 8, **fields})


def test_a_tool_round_trip_becomes_tool_calls_and_tool_turns() -> None:
    body = _request(system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
                    tools=[TOOL], messages=[
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two cities.", "signature": ""},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "21C"}]},
            {"type": "tool_result", "tool_use_id": "t2", "content": "no data", "is_error": True},
            {"type": "text", "text": "Thanks"}]}])
    chat = translate(body)
    turns = [m.template_dict() for m in chat.messages]
    assert turns[0] == {"role": "system", "content": "Be brief.\n\nUse tools."}
    assistant = turns[2]
    assert assistant["content"] == "Checking." and assistant["reasoning_content"] == "Two cities."
    assert [(c["id"], c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        ("t1", {"city": "Paris"}), ("t2", {"city": "Rome"})]
    assert turns[3:] == [
        {"role": "tool", "tool_call_id": "t1", "content": "21C", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no data", "name": "get_weather"},
        {"role": "user", "content": "Thanks"}]
    assert chat.tools[0].parameters == TOOL["input_schema"]
    assert chat.max_tokens is None  # the route caps at max_tokens (beyond the context is no error)


@pytest.mark.parametrize("choice, expected", [({"type": "auto"}, "auto"), ({"type": "any"}, "required"),
                                              ({"type": "none"}, "none")])
def test_tool_choice_maps_to_the_chat_s(choice: dict, expected: str) -> None:
    chat = translate(_request(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], tool_choice=choice))
    assert chat.tool_choice == expected and chat.parallel_tool_calls


def test_a_named_tool_without_parallel_calls() -> None:
    chat = translate(_request(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], tool_choice={
        "type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}))
    assert chat.tool_choice == NamedTool("get_weather") and not chat.parallel_tool_calls


def test_thinking_switches_and_output_format() -> None:
    hi = [{"role": "user", "content": "hi"}]
    assert translate(_request(messages=hi)).reasoning_effort is None
    assert translate(_request(messages=hi, thinking={"type": "disabled"})).reasoning_effort == "none"
    assert translate(_request(messages=hi, thinking={"type": "enabled", "budget_tokens": 2048})
                     ).reasoning_effort == "medium"
    assert translate(_request(messages=hi, thinking={"type": "adaptive"}, output_config={"effort": "max"})
                     ).reasoning_effort == "high"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = translate(_request(messages=hi, output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert chat.output_format == OutputFormat("json_schema", schema, param="output_config.format.schema")


def test_thinking_cannot_be_switched_off_where_the_template_always_thinks() -> None:
    always = ServedModel(context_length=64, tokenizer=None,  # type: ignore[arg-type] - decide() reads the template
                         chat_template=ChatTemplate(reference_chat_template("llama-cpp-deepseek-r1")))
    chat = translate(_request(messages=[{"role": "user", "content": "hi"}], thinking={"type": "disabled"}))
    with pytest.raises(RequestError) as refused:
        decide(always, chat)
    assert refused.value.param == "thinking" and "always thinks" in refused.value.message


def test_count_tokens_bodies_translate_without_generation_fields() -> None:
    body = CountTokensRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                              "system": "s", "tools": [TOOL]})
    chat = translate(body)
    assert [m.role for m in chat.messages] == ["system", "user"] and chat.sampling == Sampling()
    assert json.loads(json.dumps(chat.tools[0].parameters)) == TOOL["input_schema"]
