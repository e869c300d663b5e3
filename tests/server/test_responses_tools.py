"""/v1/responses on GGUF bundles whose tokenizers carry real tool-capable templates (Qwen2.5's Hermes-style
``<tool_call>``, Llama 3.1's JSON calls; tests/fixtures/tool_chat_models.py), with the official openai client.

The models are tiny and random: only constrained decoding makes their calls and JSON valid, so these tests
fail on a Responses face that renders tools or ``text.format`` without enforcing them. A round trip's prompt
is checked against the chat request it stands for (same token count: one template path), and chained
stored turns must find their earlier prompts in the prefix cache.
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
from tests.server.responses_events import check_events, stream_events

pytestmark = pytest.mark.timeout(900)
SCHEMAS = random_schemas(50, seed=31)
WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                       "unit": {"enum": ["celsius", "fahrenheit"]}},
                      "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": WEATHER_PARAMETERS, "strict": True}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
QUESTION = "What is the weather in Paris?"


@pytest.fixture(scope="module", params=["qwen2.5", "llama3.1"])
def live(request, tool_chat_bundle_factory) -> Iterator[Any]:
    server = serve_bundle_live(tool_chat_bundle_factory(request.param, "gguf"), context=4096)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _check_call(item: Any) -> None:
    assert item.type == "function_call" and item.name == "get_weather" and item.call_id and item.id
    assert item.status == "completed"
    jsonschema.validate(json.loads(item.arguments), WEATHER_PARAMETERS)


def test_forced_function_call(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=QUESTION, tools=[WEATHER], tool_choice="required",
                                       parallel_tool_calls=False, temperature=1.0, extra_body={"seed": 1}, max_output_tokens=400)
    assert response.status == "completed", response
    [call] = [item for item in response.output if item.type == "function_call"]
    _check_call(call)


def test_named_function_call_streamed(client: openai.OpenAI, live) -> None:
    ask = dict(model=MODEL, input=QUESTION, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
               parallel_tool_calls=False, temperature=1.0, extra_body={"seed": 3}, max_output_tokens=400)
    raw = {key: value for key, value in ask.items() if key != "extra_body"} | ask["extra_body"]
    final = check_events(stream_events(live.url, raw))
    assert final.status == "completed"
    [call] = [item for item in final.output if item.type == "function_call"]
    _check_call(call)
    with client.responses.stream(**ask) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.function_call_arguments.delta")
        helper_final = stream.get_final_response()
    [call] = [item for item in helper_final.output if item.type == "function_call"]
    _check_call(call)
    assert call.arguments == deltas


def test_function_call_output_round_trip_is_the_same_prompt_as_the_chat(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=QUESTION, tools=[WEATHER], tool_choice="required",
                                    parallel_tool_calls=False, temperature=1.0, extra_body={"seed": 5}, max_output_tokens=400,
                                    store=False)
    [call] = [item for item in first.output if item.type == "function_call"]
    items = [{"role": "user", "content": QUESTION}, call.model_dump(exclude_unset=True),
             {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp_c": 21})}]
    final = client.responses.create(model=MODEL, input=items, tools=[WEATHER], max_output_tokens=16,
                                    temperature=1.0, extra_body={"seed": 2}, store=False)
    assert final.status in ("completed", "incomplete") and final.output
    chat = client.chat.completions.create(model=MODEL, tools=[CHAT_WEATHER], max_tokens=1, messages=[
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [{"id": call.call_id, "type": "function", "function": {
            "name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "name": call.name, "content": json.dumps({"temp_c": 21})}])
    assert final.usage.input_tokens == chat.usage.prompt_tokens


def _json_answer(client: openai.OpenAI, index: int) -> None:
    schema = SCHEMAS[index]
    response = client.responses.create(model=MODEL, input="Answer in JSON.", max_output_tokens=600,
                                       temperature=1.0, extra_body={"seed": index}, store=False,
                                       text={"format": {"type": "json_schema", "name": f"schema_{index}",
                                                        "schema": schema, "strict": True}})
    assert response.status == "completed", (index, response.incomplete_details)
    jsonschema.validate(json.loads(response.output_text), schema)


def test_text_format_json_schema_validates_over_50_schemas(client: openai.OpenAI) -> None:
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda i: _json_answer(client, i), range(len(SCHEMAS))))


def test_chained_turns_reuse_the_earlier_prompts_from_the_prefix_cache(client: openai.OpenAI) -> None:
    """On real templates, a stored turn re-renders as the same prompt: each follow-up's prompt starts with
    the previous one, which the prefix cache still holds. (A random model's answer tokens need not be
    the tokenizer's own spelling of their text, so only the prompts are counted here; with a trained model,
    test_responses_smollm2.py counts the answers too.)"""
    instructions = "You are a helpful assistant for travellers. Answer briefly and politely."
    previous = None
    turns = []
    for question in ("Where is Paris?", "And what should I see there?", "How do I get there by train?"):
        response = client.responses.create(model=MODEL, instructions=instructions, input=question,
                                           previous_response_id=previous, max_output_tokens=24, temperature=0)
        turns.append(response.usage)
        previous = response.id
    for before, after in zip(turns, turns[1:]):
        assert after.input_tokens > before.input_tokens + before.output_tokens  # it carries the earlier turn
        assert after.input_tokens_details.cached_tokens >= before.input_tokens, turns


def test_text_format_json_object_is_a_json_object_streamed_and_not(client: openai.OpenAI, live) -> None:
    ask = {"model": MODEL, "input": "Describe Paris in JSON.", "max_output_tokens": 300,
           "text": {"format": {"type": "json_object"}}, "store": False}
    whole = client.responses.create(**ask, extra_body={"seed": 7})
    streamed = check_events(stream_events(live.url, {**ask, "seed": 8}))
    for response in (whole, streamed):
        assert response.status == "completed", response.incomplete_details
        assert isinstance(json.loads(response.output_text), dict)
        assert response.text.format.type == "json_object"
