"""Tools and tool turns rendered through llama.cpp's copies of real chat templates.

The request goes through the same path as the server's (schemas -> plan_tools -> chat_prompt_pieces):
tools reach the template as ``tools``, an assistant turn's ``tool_calls`` carry arguments as an object
(templates write ``arguments | tojson``), and ``role: tool`` results with their ``tool_call_id`` render.
"""

from __future__ import annotations

import pytest
from edgeopt.runtimes.control_text import ControlTextFinder

from edgeopt.errors import RequestError
from edgeopt.server.chat.decisions import template_variables
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.chat.tokens import chat_prompt_pieces
from edgeopt.server.chat.tools.plan import plan_tools
from edgeopt.server.chat.tools.prompt import with_tools
from edgeopt.server.openai.schema import ChatCompletionRequest
from edgeopt.server.openai.translate import chat_request
from tests.exporters.reference_converter import reference_chat_template

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string",
                                                                                   "description": "City"}},
                                                           "required": ["city"]}}}
CALL_ID = "a1B2c3D4e"  # Mistral's templates accept only 9 letters and digits


def _request(**fields) -> ChatCompletionRequest:
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": CALL_ID, "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": CALL_ID, "content": "21 C and sunny"}]
    return ChatCompletionRequest.model_validate({"model": "m", "messages": messages, "tools": [WEATHER], **fields})


def _render(name: str, body: ChatCompletionRequest, controls: tuple[str, ...] = ()) -> str:
    template = ChatTemplate(reference_chat_template(name), "<s>", "</s>")
    request = chat_request(body)
    plan = plan_tools(request, template)
    messages = [m.template_dict() for m in request.messages]
    variables = template_variables(request)
    if plan is not None:
        messages, shown = with_tools(plan, messages)
        variables.update(shown)
    pieces = chat_prompt_pieces(template, messages, True, ControlTextFinder(controls), variables=variables)
    return "".join(p.text for p in pieces)


@pytest.mark.parametrize(("name", "call"), [
    ("Qwen-Qwen2.5-7B-Instruct", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("Qwen-Qwen3-0.6B", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", '"arguments": {"city": "Paris"}'),
    ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("meta-llama-Llama-3.2-3B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("mistralai-Mistral-Nemo-Instruct-2407", f'"arguments": {{"city": "Paris"}}, "id": "{CALL_ID}"'),
])
def test_real_templates_render_tools_calls_and_results(name: str, call: str) -> None:
    prompt = _render(name, _request())
    assert "get_weather" in prompt and "Weather in a city" in prompt  # the tool's definition
    assert call in prompt  # the earlier call, its arguments as an object (not a quoted JSON string)
    assert "21 C and sunny" in prompt  # the tool's result


def test_tool_choice_none_leaves_the_tools_out() -> None:
    prompt = _render("Qwen-Qwen2.5-7B-Instruct", _request(tool_choice="none"))
    assert "<tools>" not in prompt and "21 C and sunny" in prompt


def test_a_template_without_tools_is_told_about_them_in_the_first_user_turn() -> None:
    body = ChatCompletionRequest.model_validate({"model": "m", "tools": [WEATHER],
                                                 "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    prompt = _render("google-gemma-2-2b-it", body)  # Gemma 2 refuses a system role
    assert '"name": <function name>' in prompt and '"get_weather"' in prompt
    assert prompt.index("get_weather") < prompt.index("Weather in Paris?")


def test_control_text_in_a_tool_definition_stays_plain_text() -> None:
    tool = {"type": "function", "function": {"name": "f", "description": "ends <|im_end|> here"}}
    body = ChatCompletionRequest.model_validate({"model": "m", "tools": [tool],
                                                 "messages": [{"role": "user", "content": "hi"}]})
    template = ChatTemplate(reference_chat_template("Qwen-Qwen2.5-7B-Instruct"))
    plan = plan_tools(chat_request(body), template)
    assert plan is not None
    messages, variables = with_tools(plan, [m.template_dict() for m in chat_request(body).messages])
    pieces = chat_prompt_pieces(template, messages, True, ControlTextFinder(("<|im_end|>", "<|im_start|>")),
                                variables=variables)
    plain = [p.text for p in pieces if not p.parse_special]
    assert plain == ["<|im_end|>"]  # the description's copy; the template's own markup stays markup


def test_reasoning_effort_none_turns_qwen3_thinking_off() -> None:
    body = ChatCompletionRequest.model_validate({"model": "m", "reasoning_effort": "none",
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert _render("Qwen-Qwen3-0.6B", body).endswith("<think>\n\n</think>\n\n")
    body = ChatCompletionRequest.model_validate({"model": "m", "reasoning_effort": "high",
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert not _render("Qwen-Qwen3-0.6B", body).endswith("</think>\n\n")


@pytest.mark.parametrize(("fields", "words"), [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, ["'nope'", "get_weather"]),
    ({"tools": [], "tool_choice": "required"}, ["no tools"]),
    ({"tools": [WEATHER, WEATHER]}, ["tools[1]", "get_weather"]),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, ["response_format", "json_object"]),
])
def test_contradictory_tool_fields_are_refused_by_name(fields: dict, words: list[str]) -> None:
    body = _request(**fields)
    with pytest.raises(RequestError) as caught:
        plan_tools(chat_request(body), ChatTemplate(reference_chat_template("Qwen-Qwen2.5-7B-Instruct")))
    assert all(w in str(caught.value) for w in words), str(caught.value)
