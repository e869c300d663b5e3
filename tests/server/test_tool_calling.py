"""Tool calling with the official ``openai`` client on bundles carrying real chat templates (GGUF for
Qwen2.5 and Llama 3.1, and ONNX for Qwen2.5: the route is the same for every runtime).

The models are tiny and random (tests/fixtures/tool_chat_models.py): only constrained decoding makes
their calls valid, so these tests fail on a server that renders tools without enforcing
``tool_choice="required"``, or that reads calls in another family's syntax. ``jsonschema`` judges the
arguments of 50 seeded random schemas (tests/fixtures/json_schemas.py) per family.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest

from tests.fixtures.json_schemas import random_schemas
from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live

pytestmark = pytest.mark.timeout(900)
SCHEMAS = random_schemas(50, seed=31)
MAX_TOKENS = 400
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module", params=["qwen2.5-gguf", "llama3.1-gguf", "qwen2.5-onnx"])
def client(request, tool_chat_bundle_factory) -> Iterator[openai.OpenAI]:
    family, fmt = request.param.split("-")
    live = serve_bundle_live(tool_chat_bundle_factory(family, fmt), context=4096)
    try:
        yield openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        live.stop()


def _tool_result_turns(call: Any) -> list[dict[str, Any]]:
    """The assistant turn that made ``call`` and the tool's answer to it, as a client sends them back."""
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                         "arguments": call.function.arguments}}]}
    return [assistant, {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21})}]


def _check_weather_call(call: Any) -> None:
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_round_trip_non_streaming(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="required",
                                           max_tokens=MAX_TOKENS, temperature=1.0, seed=1, store=False,
                                           metadata={"run": "test"}, parallel_tool_calls=False)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    _check_weather_call(call)
    final = client.chat.completions.create(model=MODEL, messages=[*QUESTION, *_tool_result_turns(call)],
                                           tools=[WEATHER], max_tokens=16, temperature=1.0, seed=2)
    assert final.choices[0].finish_reason in ("stop", "length")
    assert isinstance(final.choices[0].message.content, str) and not final.choices[0].message.tool_calls


def test_round_trip_streaming(client: openai.OpenAI) -> None:
    ask = dict(model=MODEL, messages=QUESTION, tools=[WEATHER], max_tokens=MAX_TOKENS, temperature=1.0, seed=3,
               tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
    # The client's stream helper rebuilds the message from the deltas and refuses malformed ones.
    with client.chat.completions.stream(**ask) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        streamed = stream.get_final_completion()
    [call] = streamed.choices[0].message.tool_calls
    _check_weather_call(call)
    assert streamed.choices[0].finish_reason == "tool_calls"
    # As OpenAI streams them: the call's id and name in its first delta, then only argument pieces (the server
    # sends text at most every 50 ms, so a tiny model's whole call may come in that first delta).
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert deltas[0].id == call.id and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    whole = client.chat.completions.create(**ask).choices[0].message.tool_calls[0]
    assert whole.function.arguments == call.function.arguments  # same seed, same constrained draw
    final = list(client.chat.completions.create(model=MODEL, messages=[*QUESTION, *_tool_result_turns(call)],
                                                tools=[WEATHER], max_tokens=16, temperature=1.0, seed=4, stream=True,
                                                stream_options={"include_usage": True}))
    assert final[-2].choices[0].finish_reason in ("stop", "length") and final[-1].usage.completion_tokens >= 1
    assert "".join(c.choices[0].delta.content or "" for c in final if c.choices)


def _forced_call(client: openai.OpenAI, index: int) -> tuple[str, list[Any]]:
    tools = [{"type": "function", "function": {"name": f"record_{index}", "parameters": SCHEMAS[index]}}, WEATHER]
    # Half ask for any call ("required"), half name the function; both must follow the schema.
    choice: Any = "required" if index % 2 else {"type": "function", "function": {"name": f"record_{index}"}}
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Store record {index}."}], tools=tools,
        tool_choice=choice, parallel_tool_calls=False, max_tokens=MAX_TOKENS, temperature=1.0, seed=index)
    return reply.choices[0].finish_reason, reply.choices[0].message.tool_calls or []


def test_required_tool_calls_follow_the_schema_every_time(client: openai.OpenAI) -> None:
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda i: _forced_call(client, i), range(len(SCHEMAS))))
    unfinished = [(i, reason) for i, (reason, _) in enumerate(replies) if reason != "tool_calls"]
    assert not unfinished, f"{len(unfinished)} replies are no finished tool call: {unfinished[:5]}"
    for i, (_, calls) in enumerate(replies):
        [call] = calls
        schema = SCHEMAS[i] if call.function.name == f"record_{i}" else WEATHER["function"]["parameters"]
        assert i % 2 or call.function.name == f"record_{i}"  # a named function is the one called
        jsonschema.validate(json.loads(call.function.arguments), schema)


def test_parallel_calls_each_follow_their_schema(client: openai.OpenAI) -> None:
    """Hermes-style templates take several calls per turn; Llama 3's allow one (its template refuses more)."""
    tools = [WEATHER, {"type": "function", "function": {"name": "now", "parameters": SCHEMAS[0]}}]
    schemas = {"get_weather": WEATHER["function"]["parameters"], "now": SCHEMAS[0]}
    for seed in range(5):
        reply = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=tools, tool_choice="required",
                                               max_tokens=MAX_TOKENS, temperature=1.0, seed=seed)
        assert reply.choices[0].finish_reason == "tool_calls"
        calls = reply.choices[0].message.tool_calls
        assert calls and [c.id for c in calls] == list(dict.fromkeys(c.id for c in calls))  # ids are distinct
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_auto_reads_the_call_a_model_writes(tool_chat_bundle_factory) -> None:
    """tool_choice="auto" parses whatever the model writes. A JSON answer shaped as a Llama 3 call (here
    forced through response_format) is a call to the Llama 3 parser, streaming or not."""
    live = serve_bundle_live(tool_chat_bundle_factory("llama3.1", "gguf"), context=4096)
    shaped = {"type": "object", "properties": {"name": {"const": "get_weather"},
                                               "parameters": WEATHER["function"]["parameters"]},
              "required": ["name", "parameters"], "additionalProperties": False}
    ask = dict(model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="auto", max_tokens=MAX_TOKENS,
               temperature=1.0, seed=5, response_format={"type": "json_schema",
                                                         "json_schema": {"name": "call", "schema": shaped}})
    try:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
        whole = client.chat.completions.create(**ask).choices[0]
        with client.chat.completions.stream(**ask) as stream:
            streamed = stream.get_final_completion().choices[0]
    finally:
        live.stop()
    for choice in (whole, streamed):
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        _check_weather_call(choice.message.tool_calls[0])
    assert whole.message.tool_calls[0].function.arguments == streamed.message.tool_calls[0].function.arguments
