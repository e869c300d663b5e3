"""The official ``anthropic`` client against ``edgeopt serve`` of GGUF bundles whose tokenizers carry real
chat templates (tests/fixtures/tool_chat_models.py): Qwen2.5's (Hermes tool calls) for tools, and
DeepSeek-R1-Distill-Qwen's (a thinking template) for thinking; and the real SmolLM2-135M-Instruct
(edgeopt/demo/smollm2.py) where an answer must make sense.

The models are tiny and random: only constrained decoding makes their calls valid, so these tests fail on a
server that renders tools without enforcing ``tool_choice``. Thinking is judged against
/v1/chat/completions at temperature 0 (the same prompt, so the same greedy output): both APIs must split
it the same way. Streams are read with the client's own event models (``messages.stream``), which refuse
events whose fields are missing or mistyped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live, smollm2_bundle

pytestmark = pytest.mark.timeout(600)
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
                            "required": ["city", "unit"], "additionalProperties": False}}
CLOCK = {"name": "now", "input_schema": {"type": "object", "properties": {}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 300
STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def tools_client(tool_chat_bundle_factory) -> Iterator[anthropic.Anthropic]:
    live = serve_bundle_live(tool_chat_bundle_factory("qwen2.5"), context=4096)
    try:
        yield anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0, timeout=120)
    finally:
        live.stop()


def _check_call(block: Any) -> None:
    assert block.type == "tool_use" and block.id and block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER["input_schema"])


def test_forced_tool_use_then_a_tool_result_round_trip(tools_client: anthropic.Anthropic) -> None:
    ask = dict(model=MODEL, max_tokens=MAX_TOKENS, messages=QUESTION, tools=[WEATHER, CLOCK],
               tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    reply = tools_client.messages.create(**ask)
    assert reply.stop_reason == "tool_use", reply
    [call] = [block for block in reply.content if block.type == "tool_use"]
    _check_call(call)
    counted = tools_client.messages.count_tokens(**{k: v for k, v in ask.items() if k != "max_tokens"})
    assert counted.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens
    result = [{"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in reply.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                            "content": [{"type": "text", "text": json.dumps({"temp_c": 21})}]}]}]
    final = tools_client.messages.create(model=MODEL, max_tokens=16, messages=[*QUESTION, *result],
                                         tools=[WEATHER, CLOCK])
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.usage.cache_read_input_tokens > 0  # the first turn's prompt came back from the prefix cache


def test_streamed_tool_use_is_rebuilt_by_the_client(tools_client: anthropic.Anthropic) -> None:
    with tools_client.messages.stream(model=MODEL, max_tokens=MAX_TOKENS, messages=QUESTION, tools=[WEATHER],
                                      tool_choice={"type": "any", "disable_parallel_tool_use": True}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [call] = final.content
    _check_call(call)
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta"]
    assert pieces and json.loads("".join(pieces)) == call.input
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"] and starts[0].content_block.id == call.id
    assert events[-1].type == "message_stop" and final.usage.output_tokens > 0


def test_tool_choice_none_answers_in_text(tools_client: anthropic.Anthropic) -> None:
    reply = tools_client.messages.create(model=MODEL, max_tokens=8, messages=QUESTION, tools=[WEATHER],
                                         tool_choice={"type": "none"})
    assert reply.stop_reason in ("end_turn", "max_tokens") and all(b.type == "text" for b in reply.content)


@pytest.fixture(scope="module")
def thinking_server(tool_chat_bundle_factory) -> Iterator[tuple[anthropic.Anthropic, openai.OpenAI]]:
    live = serve_bundle_live(tool_chat_bundle_factory("deepseek-r1"), context=512)
    try:
        yield (anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0, timeout=120),
               openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120))
    finally:
        live.stop()


def _blocks(message: Any) -> tuple[str, str]:
    """(thinking, text) of a message, each block kind joined."""
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    return thinking, "".join(b.text for b in message.content if b.type == "text")


@pytest.mark.parametrize("switch, effort", [({"type": "enabled", "budget_tokens": 1024}, "medium"),
                                            ({"type": "disabled"}, "none")])
def test_thinking_blocks_hold_what_chat_completions_calls_reasoning(thinking_server, switch: dict,
                                                                    effort: str) -> None:
    messages_client, chat_client = thinking_server
    question = [{"role": "user", "content": "Why is the sky blue?"}]
    chat = chat_client.chat.completions.create(model=MODEL, messages=question, max_tokens=24, temperature=0.0,
                                               reasoning_effort=effort).choices[0].message
    expected = (getattr(chat, "reasoning_content", None) or "", chat.content or "")
    assert expected[0] if effort != "none" else not expected[0]  # the template opened the block, or closed it
    ask = dict(model=MODEL, max_tokens=24, messages=question, thinking=switch, extra_body={"temperature": 0.0})
    reply = messages_client.messages.create(**ask)
    assert _blocks(reply) == expected
    assert [b.type for b in reply.content] == [k for k, text in zip(("thinking", "text"), expected) if text]
    assert all(b.signature == "" for b in reply.content if b.type == "thinking")
    with messages_client.messages.stream(**ask) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    assert _blocks(streamed) == expected and streamed.usage.output_tokens == reply.usage.output_tokens
    thinking_deltas = "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                              and e.delta.type == "thinking_delta")
    assert thinking_deltas == expected[0]


@pytest.fixture(scope="module")
def smollm2_client(smollm2_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    live = serve_bundle_live(smollm2_bundle(smollm2_checkpoint, tmp_path_factory.mktemp("smollm2")), context=2048)
    try:
        yield anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0, timeout=120)
    finally:
        live.stop()


def test_a_real_model_reads_the_tool_result_it_asked_for(smollm2_client: anthropic.Anthropic) -> None:
    """SmolLM2-135M-Instruct, a real trained model: the call is forced (a 135M model need not choose to
    call), the answer after the tool's result is its own, held to a JSON schema it must fill from the result."""
    greedy = {"temperature": 0.0}
    first = smollm2_client.messages.create(model=MODEL, max_tokens=MAX_TOKENS, messages=QUESTION, tools=[WEATHER],
                                           tool_choice={"type": "tool", "name": "get_weather"}, extra_body=greedy)
    [call] = [block for block in first.content if block.type == "tool_use"]
    _check_call(call)
    turns = [*QUESTION, {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                           "content": json.dumps({"temperature_c": 21, "sky": "sunny"})}]}]
    report = {"type": "object", "properties": {"temperature_c": {"type": "integer"}},
              "required": ["temperature_c"], "additionalProperties": False}
    with smollm2_client.messages.stream(model=MODEL, max_tokens=40, messages=turns, tools=[WEATHER],
                                        output_config={"format": {"type": "json_schema", "schema": report}},
                                        extra_body=greedy) as stream:
        answer = stream.get_final_message()
    assert answer.stop_reason == "end_turn"
    assert json.loads(answer.content[0].text) == {"temperature_c": 21}


def test_a_real_model_answers_in_text(smollm2_client: anthropic.Anthropic) -> None:
    reply = smollm2_client.messages.create(model=MODEL, max_tokens=24, system="Answer in one short sentence.",
                                           messages=[{"role": "user", "content": "What is the capital of France?"}],
                                           extra_body={"temperature": 0.0})
    assert "Paris" in reply.content[0].text and reply.stop_reason == "end_turn"


def _strictly_typed(base_url: str, body: dict[str, Any]) -> tuple[list[Any], Any]:
    """The raw stream and the whole reply of ``body``, validated (not merely constructed, as the client
    does) against the anthropic package's own models: a missing or mistyped field fails here."""
    events = []
    with httpx.stream("POST", f"{base_url}/v1/messages", json={**body, "stream": True}, timeout=120) as response:
        assert response.status_code == 200
        lines = list(response.iter_lines())
    for name, data in zip(lines[0::3], lines[1::3]):
        assert name.startswith("event: ") and data.startswith("data: "), (name, data)
        payload = json.loads(data[6:])
        assert payload["type"] == name[7:]
        if name != "event: ping":
            events.append(STREAM_EVENT.validate_python(payload))
    whole = httpx.post(f"{base_url}/v1/messages", json=body, timeout=120)
    assert whole.status_code == 200
    return events, anthropic.types.Message.model_validate(whole.json())


def test_events_and_replies_validate_against_the_client_s_models(tools_client, thinking_server) -> None:
    forced = dict(model=MODEL, max_tokens=MAX_TOKENS, messages=QUESTION, tools=[WEATHER],
                  tool_choice={"type": "any"})
    events, whole = _strictly_typed(str(tools_client.base_url).rstrip("/"), forced)
    assert [e.type for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-2].type == "message_delta" and events[-2].delta.stop_reason == "tool_use" == whole.stop_reason
    assert whole.content[-1].type == "tool_use"
    messages_client = thinking_server[0]
    thinking = dict(model=MODEL, max_tokens=16, messages=QUESTION, thinking={"type": "enabled", "budget_tokens": 1024},
                    temperature=0)  # greedy: a sampled first token may end the reply at once (an empty content)
    events, whole = _strictly_typed(str(messages_client.base_url).rstrip("/"), thinking)
    assert whole.content[0].type == "thinking"
    assert any(e.type == "content_block_delta" and e.delta.type == "thinking_delta" for e in events)
