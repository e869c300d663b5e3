"""Qwen3's real chat template, whose model opens ``<think>`` itself: the thinking, the answer and a tool
call after the thinking come apart on /v1/chat/completions and /v1/messages, streamed and not, read by the
official clients. The real engine and server run over the fake runtime scripted to say a Qwen3-style
reply (tests/fixtures/fake_runtime.py), so the reply is known exactly; test_reasoning_output.py and
test_anthropic_client.py serve a real GGUF bundle.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from edgeopt.server.app import create_app
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.state import ServerSettings
from tests.exporters.reference_converter import reference_chat_template
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import MODEL, fake_served_model
from tests.server.live import start_live_server

pytestmark = pytest.mark.timeout(120)
THOUGHT = "The user asks for the weather.\nI should call the tool."
ARGUMENTS = {"city": "Paris"}
CALL_REPLY = (f"<think>\n{THOUGHT}\n</think>\n\n<tool_call>\n"
              f'{{"name": "get_weather", "arguments": {json.dumps(ARGUMENTS)}}}\n</tool_call>')
TEXT_REPLY = f"<think>\n{THOUGHT}\n</think>\n\nIt is sunny in Paris."
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def qwen3():
    """``qwen3(script)`` -> (openai client, anthropic client) of a server whose model says ``script``."""
    started = []

    def serve(script: str) -> tuple[openai.OpenAI, anthropic.Anthropic]:
        served = fake_served_model(FakeRuntime(script=script))
        served.chat_template = ChatTemplate(reference_chat_template("Qwen-Qwen3-0.6B"), "", "<|im_end|>")
        live = start_live_server(create_app(ServerSettings(model_names=(MODEL,), memory_budget_bytes=1 << 30),
                                            served=served))
        started.append(live)
        return (openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0),
                anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0))

    yield serve
    for live in started:
        live.stop()


def test_chat_completions_thinking_then_a_call(qwen3) -> None:
    chat, _ = qwen3(CALL_REPLY)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]}}]
    ask = dict(model=MODEL, messages=QUESTION, tools=tools, max_tokens=200)
    choice = chat.chat.completions.create(**ask).choices[0]
    message = choice.message
    assert message.reasoning_content == message.reasoning == THOUGHT
    assert message.content is None and choice.finish_reason == "tool_calls"
    [call] = message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == ARGUMENTS
    order, reasoning, arguments = [], "", ""
    for chunk in chat.chat.completions.create(**ask, stream=True):
        delta = chunk.choices[0].delta
        if getattr(delta, "reasoning_content", None):
            reasoning += delta.reasoning_content
            order.append("reasoning")
        for piece in delta.tool_calls or ():
            arguments += piece.function.arguments or ""
            order.append("call")
        assert not delta.content
    assert reasoning == THOUGHT and json.loads(arguments) == ARGUMENTS
    assert order == sorted(order, key=lambda kind: kind != "reasoning")


def test_chat_completions_thinking_then_text(qwen3) -> None:
    chat, _ = qwen3(TEXT_REPLY)
    message = chat.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=200).choices[0].message
    assert (message.reasoning_content, message.content) == (THOUGHT, "It is sunny in Paris.")


def test_messages_thinking_then_a_call(qwen3) -> None:
    _, messages = qwen3(CALL_REPLY)
    ask = dict(model=MODEL, messages=QUESTION, tools=[WEATHER], max_tokens=200)
    reply = messages.messages.create(**ask)
    assert [block.type for block in reply.content] == ["thinking", "tool_use"] and reply.stop_reason == "tool_use"
    assert reply.content[0].thinking == THOUGHT and reply.content[1].input == ARGUMENTS
    with messages.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert [block.type for block in streamed.content] == ["thinking", "tool_use"]
    assert streamed.content[0].thinking == THOUGHT and streamed.content[1].input == ARGUMENTS


def test_messages_thinking_then_text_and_omitted_thinking(qwen3) -> None:
    _, messages = qwen3(TEXT_REPLY)
    reply = messages.messages.create(model=MODEL, messages=QUESTION, max_tokens=200,
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in reply.content] == [
        ("thinking", THOUGHT), ("text", "It is sunny in Paris.")]
    hidden = messages.messages.create(model=MODEL, messages=QUESTION, max_tokens=200,
                                      thinking={"type": "enabled", "budget_tokens": 1024, "display": "omitted"})
    assert hidden.content[0].type == "thinking" and hidden.content[0].thinking == ""
    assert hidden.content[1].text == "It is sunny in Paris."
