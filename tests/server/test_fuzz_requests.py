"""Fuzz the OpenAI routes (issue 12): hypothesis builds completions, chat and Responses bodies from every
field of the schemas, with valid values, values at and past their ranges, wrong types, huge and non-finite numbers,
odd Unicode (lone surrogates included) and whole bodies that are not objects or not JSON. For every case:
no 5xx, a 4xx is an OpenAI error body, a 200 is a well-formed reply, and a normal request is still
served right after. Bounded to seconds (max_examples), against the real app, engine and uvicorn over the
fake runtime."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(300)

FUZZ_SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                HealthCheck.data_too_large])

# Any Unicode, lone surrogates (category Cs) included: JSON can carry them as \ud800 escapes.
odd_text = st.one_of(st.text(st.characters(codec=None, categories=None), max_size=12),
                     st.sampled_from(["", " ", "\ud800", "a\udfffb", "\u0661\u0662", "<|im_start|>system", "\x00",
                                      "\U0001f600", "9" * 40]))
huge_ints = st.sampled_from([-(2**63) - 1, -(2**63), -1, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64, 10**30])
odd_floats = st.sampled_from([5e-324, -5e-324, 1e-300, 1e308, -1e308, float("inf"), float("-inf"), float("nan"),
                              0.0, -0.0, 2.0000001, 1.0])
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), odd_text)
any_json = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(odd_text, inner, max_size=3)),
                        max_leaves=6)


def number(low: float, high: float) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    """(values inside [low, high], its ends included; anything else a client could send)."""
    return (st.one_of(st.floats(low, high), st.sampled_from([low, high])),
            st.one_of(odd_floats, huge_ints, any_json))


def integer(low: int, high: int) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    return st.integers(low, high), st.one_of(huge_ints, odd_floats, any_json)


def anything(valid: st.SearchStrategy[Any]) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    return valid, any_json


plain_text = st.text(max_size=12)  # any Unicode but surrogates
token_ids = st.integers(0, 257)
bad_token_ids = st.lists(st.one_of(st.integers(-5, 10**6), huge_ints), min_size=1, max_size=3)
# Per field: (valid values, odd or invalid values). Valid values include the odd-but-legal (5e-324, ends of
# ranges, int64 seeds, any Unicode text); invalid ones are out of range, non-finite, wrong types, surrogates.
GENERATION_FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "model": (st.sampled_from([MODEL, "alias"]), st.one_of(odd_text, any_json)),
    "max_tokens": (st.one_of(st.none(), st.integers(1, 12)), st.one_of(st.integers(-2, 0), huge_ints, any_json)),
    "temperature": (st.one_of(number(0.0, 2.0)[0], st.just(5e-324)), number(0.0, 2.0)[1]),
    "top_p": (st.one_of(st.floats(5e-324, 1.0), st.just(1.0)), st.one_of(st.just(0.0), number(0, 1)[1])),
    "top_k": (st.one_of(st.integers(0, 300), st.just(2**70)), st.one_of(st.integers(-3, -1), any_json)),
    "min_p": number(0.0, 1.0),
    "seed": (st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
             st.one_of(st.sampled_from([2**63, -(2**63) - 1, 2**64]), any_json)),
    "presence_penalty": number(-2.0, 2.0),
    "frequency_penalty": number(-2.0, 2.0),
    "repetition_penalty": number(0.01, 100.0),
    "logit_bias": (st.dictionaries(token_ids.map(str), st.floats(-100, 100), max_size=3),
                   st.one_of(st.dictionaries(odd_text, st.one_of(st.floats(), any_json), min_size=1, max_size=2),
                             any_json)),
    "stop": (st.one_of(st.none(), plain_text.filter(bool), st.lists(plain_text.filter(bool), max_size=4)),
             st.one_of(st.just(""), st.lists(odd_text, min_size=5, max_size=6), any_json)),
    "stop_token_ids": (st.one_of(st.none(), st.lists(token_ids, max_size=4)), st.one_of(bad_token_ids, any_json)),
    "ignore_eos": anything(st.booleans()),
    "stream": anything(st.booleans()),
    "stream_options": anything(st.one_of(st.none(), st.fixed_dictionaries({"include_usage": st.booleans()}))),
    "n": (st.just(1), st.one_of(st.integers(2, 3), any_json)),
    "user": anything(st.one_of(st.none(), plain_text)),
    "response_format": (st.sampled_from([None, {"type": "text"}, {"type": "json_object"},
                                         {"type": "json_schema", "json_schema": {"name": "r", "schema": {
                                             "type": "object", "properties": {"a": {"type": "integer"}}}}}]),
                        st.one_of(st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries(
                            {"name": st.just("r"), "schema": any_json})}), any_json)),
    "store": anything(st.one_of(st.none(), st.booleans())),
    "metadata": (st.one_of(st.none(), st.dictionaries(plain_text, plain_text, max_size=2)), any_json),
    "service_tier": anything(st.sampled_from([None, "auto", "default", "flex"])),
    "unknown_field": (st.nothing(), any_json),
}
COMPLETION_FIELDS = {
    "prompt": (st.one_of(plain_text.filter(bool), st.lists(token_ids, min_size=1, max_size=8),
                         st.lists(plain_text.filter(bool), min_size=1, max_size=1)),
               st.one_of(odd_text, bad_token_ids, st.lists(odd_text, min_size=2, max_size=3), any_json)),
    "echo": anything(st.booleans()),
    "suffix": (st.none(), odd_text),
    "best_of": (st.sampled_from([None, 1]), st.one_of(st.integers(2, 3), any_json)),
    "logprobs": (st.one_of(st.none(), st.integers(0, 5)), st.one_of(st.integers(21, 30), any_json)),
}
text_part = st.fixed_dictionaries({"type": st.just("text"), "text": plain_text})
odd_part = st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_audio", "file", "video"]),
                                            "image_url": st.just({"url": "data:image/png;base64,AAAA"})}),
                     st.fixed_dictionaries({"type": st.just("text"), "text": odd_text}), any_json)
good_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
     "content": st.one_of(plain_text, st.none(), st.lists(text_part, max_size=3))},
    optional={"name": plain_text})
odd_message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["wizard", "", "USER"]), any_json),
     "content": st.one_of(odd_text, st.lists(st.one_of(text_part, odd_part), min_size=1, max_size=3), any_json)},
    optional={"name": odd_text, "tool_calls": any_json})
small_schemas = st.sampled_from([{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                 {"type": "object"}, {}, {"type": "object", "properties": {"s": {"type": "string",
                                                                                             "maxLength": 3}}}])
tool_definition = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.sampled_from(["f", "g", "get_weather"])},
        optional={"description": plain_text, "parameters": st.one_of(small_schemas, st.dictionaries(
            odd_text, any_json, max_size=2))})})
tool_choices = st.one_of(st.sampled_from([None, "none", "auto", "required"]), st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "nope"])})}))
CHAT_FIELDS = {
    "tools": (st.one_of(st.none(), st.lists(tool_definition, max_size=2)), any_json),
    "tool_choice": (tool_choices, st.one_of(odd_text, any_json)),
    "parallel_tool_calls": anything(st.booleans()),
    "reasoning_effort": (st.sampled_from([None, "none", "minimal", "low", "medium", "high"]), any_json),
    "messages": (st.lists(good_message, min_size=1, max_size=4),
                 st.one_of(st.lists(st.one_of(good_message, odd_message), min_size=1, max_size=4), st.just([]),
                           any_json)),
    "max_completion_tokens": (st.one_of(st.none(), st.integers(1, 12)), st.one_of(st.integers(-1, 0), any_json)),
    "logprobs": anything(st.booleans()),
    "top_logprobs": (st.one_of(st.none(), st.integers(0, 20)), st.one_of(st.integers(21, 30), any_json)),
    "add_generation_prompt": anything(st.booleans()),
}


input_part = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": plain_text})
input_item = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer", "assistant"]),
                           "content": st.one_of(plain_text, st.lists(input_part, max_size=2))},
                          optional={"type": st.just("message")}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.sampled_from(["c1", "c2"]),
                           "name": st.sampled_from(["f", "g"]), "arguments": st.sampled_from(["{}", '{"a": 1}', "x"])}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.sampled_from(["c1", "c3"]),
                           "output": plain_text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.lists(st.fixed_dictionaries(
        {"type": st.just("summary_text"), "text": plain_text}), max_size=1)}))
odd_item = st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["web_search_call", "item_reference", "computer_call",
                                                                     "message", "function_call"])}),
                     st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(st.fixed_dictionaries(
                         {"type": st.sampled_from(["input_image", "input_file", "input_text"]),
                          "text": odd_text}), min_size=1, max_size=2)}), odd_message, any_json)
response_tool = st.fixed_dictionaries({"type": st.just("function"), "name": st.sampled_from(["f", "g"])},
                                      optional={"description": plain_text, "parameters": small_schemas,
                                                "strict": st.booleans()})
RESPONSES_FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "model": GENERATION_FIELDS["model"],
    "input": (st.one_of(plain_text.filter(bool), st.lists(input_item, min_size=1, max_size=4)),
              st.one_of(st.lists(st.one_of(input_item, odd_item), min_size=1, max_size=4), st.just([]), any_json)),
    "instructions": anything(st.one_of(st.none(), plain_text)),
    "tools": (st.one_of(st.none(), st.lists(response_tool, max_size=2)),
              st.one_of(st.lists(st.fixed_dictionaries({"type": st.sampled_from(
                  ["web_search", "local_shell", "custom", "mcp", "function"])}), min_size=1, max_size=2), any_json)),
    "tool_choice": (st.one_of(st.sampled_from([None, "none", "auto", "required"]), st.fixed_dictionaries(
        {"type": st.just("function"), "name": st.sampled_from(["f", "nope"])})), st.one_of(odd_text, any_json)),
    "parallel_tool_calls": anything(st.booleans()),
    "text": (st.one_of(st.none(), st.fixed_dictionaries({}, optional={"format": st.sampled_from([
        {"type": "text"}, {"type": "json_object"},
        {"type": "json_schema", "name": "r", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}]),
        "verbosity": st.just("medium")})),
        st.one_of(st.fixed_dictionaries({"format": st.fixed_dictionaries({"type": st.just("json_schema"), "name": st.just(
            "r"), "schema": any_json})}), st.fixed_dictionaries({"verbosity": any_json}), any_json)),
    "max_output_tokens": (st.one_of(st.none(), st.integers(1, 12)),
                          st.one_of(st.integers(-2, 0), huge_ints, any_json)),
    "temperature": GENERATION_FIELDS["temperature"],
    "top_p": GENERATION_FIELDS["top_p"],
    "seed": GENERATION_FIELDS["seed"],
    "reasoning": (st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "effort": st.sampled_from(["none", "minimal", "low", "medium", "high"]),
        "summary": st.sampled_from(["auto", "concise", "detailed"])})), any_json),
    "metadata": GENERATION_FIELDS["metadata"],
    "store": anything(st.booleans()),
    "stream": anything(st.booleans()),
    "include": (st.one_of(st.none(), st.lists(st.sampled_from(["reasoning.encrypted_content",
                                                               "web_search_call.results"]), max_size=2)),
                st.one_of(st.lists(odd_text, min_size=1, max_size=2), any_json)),
    "previous_response_id": (st.none(), st.one_of(st.sampled_from(["resp_nope", ""]), any_json)),
    "top_logprobs": (st.none(), st.one_of(st.integers(-1, 30), any_json)),
    "truncation": (st.sampled_from([None, "disabled"]), st.one_of(st.just("auto"), any_json)),
    "user": GENERATION_FIELDS["user"],
    "unknown_field": GENERATION_FIELDS["unknown_field"],
}


@st.composite
def bodies(draw: st.DrawFn, required: str, fields: dict, base: dict | None = None) -> Any:
    """A valid body with a few fields, where (two times in three) one field holds an odd value; or, now
    and then, a body that is no object at all. ``base``: the shared fields (GENERATION_FIELDS by default)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(any_json)
    every = {**(GENERATION_FIELDS if base is None else base), **fields}
    chosen = draw(st.lists(st.sampled_from(sorted(set(every) - {"model", required, "unknown_field"})),
                           max_size=5, unique=True))
    body = {name: draw(every[name][0]) for name in ["model", required, *chosen]}
    if draw(st.integers(0, 2)) > 0:
        victim = draw(st.sampled_from(["model", required, *chosen, "unknown_field"]))
        body[victim] = draw(every[victim][1])
    return body


def send(client: httpx.Client, url: str, body: Any) -> httpx.Response:
    # Encoded by hand: NaN/Infinity and \ud800 escapes are what a hostile client sends (httpx refuses them).
    payload = json.dumps(body, ensure_ascii=True, allow_nan=True).encode()
    return client.post(url, content=payload, headers={"content-type": "application/json"})


def check_reply(response: httpx.Response, body: Any) -> None:
    assert response.status_code < 500, (body, response.status_code, response.text)
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], response.text
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", response.text
        assert all("error" not in json.loads(e) for e in events[:-1]), response.text
    else:
        reply = response.json()
        assert reply["choices"][0]["finish_reason"] in ("stop", "length"), reply


def check_response_reply(response: httpx.Response, body: Any) -> None:
    """/v1/responses: an error body, a response object, or a stream of events the openai client parses."""
    from tests.server.responses_events import EVENT

    assert response.status_code < 500, (body, response.status_code, response.text)
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], response.text
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [EVENT.validate_json(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type in ("response.completed", "response.incomplete"), response.text
    else:
        assert response.json()["status"] in ("completed", "incomplete"), response.text


def still_serving(client: httpx.Client, url: str) -> None:
    ok = client.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "ok", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2, ok.text


@pytest.fixture
def fuzz_server(serve_fake):
    # A short context keeps every accepted generation short (and max_tokens=None means "the rest of it").
    live = serve_fake(context_length=192, kv_capacity_tokens=2048)
    with httpx.Client(base_url=live.url, timeout=30) as client:
        yield live, client


@FUZZ_SETTINGS
@given(body=bodies("prompt", COMPLETION_FIELDS))
def test_fuzzed_completions_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any) -> None:
    live, client = fuzz_server
    check_reply(send(client, "/v1/completions", body), body)
    still_serving(client, live.url)


@FUZZ_SETTINGS
@given(body=bodies("messages", CHAT_FIELDS))
def test_fuzzed_chat_completions_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any) -> None:
    live, client = fuzz_server
    check_reply(send(client, "/v1/chat/completions", body), body)
    still_serving(client, live.url)


@FUZZ_SETTINGS
@given(body=bodies("input", RESPONSES_FIELDS, base={}))
def test_fuzzed_responses_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any) -> None:
    live, client = fuzz_server
    check_response_reply(send(client, "/v1/responses", body), body)
    still_serving(client, live.url)


@FUZZ_SETTINGS
@given(raw=st.one_of(st.binary(max_size=64), st.text(max_size=40).map(str.encode),
                     st.sampled_from([b"", b"{", b'{"model": "fake-model",,}', b"\xff\xfe\x00", b"NaN", b"[]"])))
def test_fuzzed_raw_bytes_are_4xx_and_the_server_keeps_serving(fuzz_server, raw: bytes) -> None:
    live, client = fuzz_server
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/responses"):
        response = client.post(path, content=raw, headers={"content-type": "application/json"})
        check_reply(response, raw)
        assert response.status_code != 200, response.text
    still_serving(client, live.url)


# -- Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) --

text_block = st.fixed_dictionaries({"type": st.just("text"), "text": plain_text},
                                   optional={"cache_control": st.just({"type": "ephemeral"})})
tool_use_block = st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.sampled_from(["t1", "t2"]),
                                        "name": st.sampled_from(["f", "g"]),
                                        "input": st.dictionaries(plain_text, plain_text, max_size=2)})
tool_result_block = st.fixed_dictionaries({"type": st.just("tool_result"),
                                           "tool_use_id": st.sampled_from(["t1", "t9"])},
                                          optional={"content": st.one_of(plain_text, st.lists(text_block, max_size=2)),
                                                    "is_error": st.booleans()})
thinking_block = st.fixed_dictionaries({"type": st.just("thinking"), "thinking": plain_text, "signature": plain_text})
odd_block = st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["image", "document", "server_tool_use", "video"]),
                                             "source": st.just({"type": "base64", "data": "AA"})}),
                      st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking"])}),
                      st.fixed_dictionaries({"type": st.just("text"), "text": odd_text}), any_json)
user_turn = st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(
    plain_text, st.lists(st.one_of(text_block, tool_result_block), min_size=1, max_size=3))})
assistant_turn = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(
    plain_text, st.lists(st.one_of(text_block, tool_use_block, thinking_block), min_size=1, max_size=3))})
conversations = st.one_of(st.lists(user_turn, min_size=1, max_size=2),
                          st.tuples(user_turn, assistant_turn, user_turn).map(list))
odd_turn = st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["system", "tool", ""]), any_json),
                                  "content": st.one_of(odd_text, st.lists(odd_block, min_size=1, max_size=2),
                                                       any_json)})
anthropic_tool = st.fixed_dictionaries({"name": st.sampled_from(["f", "g", "get_weather"])},
                                       optional={"description": plain_text, "input_schema": small_schemas,
                                                 "cache_control": st.just({"type": "ephemeral"})})
anthropic_tool_choice = st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "none"])},
                                                        optional={"disable_parallel_tool_use": st.booleans()}),
                                  st.fixed_dictionaries({"type": st.just("tool"),
                                                         "name": st.sampled_from(["f", "nope"])}))
MESSAGES_FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "model": GENERATION_FIELDS["model"],
    "max_tokens": (st.integers(1, 12), st.one_of(st.integers(-2, 0), huge_ints, any_json)),
    "messages": (conversations, st.one_of(st.lists(st.one_of(user_turn, odd_turn), min_size=1, max_size=3),
                                          st.just([]), st.lists(assistant_turn, min_size=1, max_size=1), any_json)),
    "system": (st.one_of(plain_text, st.lists(text_block, max_size=2)), st.one_of(st.lists(odd_block, min_size=1,
                                                                                            max_size=2), any_json)),
    "stop_sequences": (st.lists(plain_text.filter(bool), max_size=4),
                       st.one_of(st.just([""]), st.lists(odd_text, min_size=5, max_size=6), any_json)),
    "stream": anything(st.booleans()),
    "temperature": GENERATION_FIELDS["temperature"],
    "top_p": GENERATION_FIELDS["top_p"],
    "top_k": GENERATION_FIELDS["top_k"],
    "tools": (st.lists(anthropic_tool, max_size=2),
              st.one_of(st.lists(st.fixed_dictionaries({"type": st.sampled_from(["web_search_20250305", "bash"]),
                                                        "name": plain_text}), min_size=1, max_size=1), any_json)),
    "tool_choice": (anthropic_tool_choice, st.one_of(odd_text, any_json)),
    "thinking": (st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["enabled", "disabled", "adaptive"])},
                                                 optional={"budget_tokens": st.integers(1, 4096)})), any_json),
    "metadata": (st.fixed_dictionaries({}, optional={"user_id": plain_text}), any_json),
    "output_config": (st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["low", "high", "max"])}),
                      any_json),
    "service_tier": anything(st.sampled_from(["auto", "standard_only"])),
    "unknown_field": (st.nothing(), any_json),
}


@st.composite
def messages_bodies(draw: st.DrawFn) -> Any:
    """As ``bodies``, for the Messages API's fields (model, max_tokens and messages always there)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(any_json)
    required = ["model", "max_tokens", "messages"]
    chosen = draw(st.lists(st.sampled_from(sorted(set(MESSAGES_FIELDS) - {*required, "unknown_field"})),
                           max_size=5, unique=True))
    body = {name: draw(MESSAGES_FIELDS[name][0]) for name in [*required, *chosen]}
    if draw(st.integers(0, 2)) > 0:
        victim = draw(st.sampled_from([*required, *chosen, "unknown_field"]))
        body[victim] = draw(MESSAGES_FIELDS[victim][1])
    return body


def check_anthropic_reply(response: httpx.Response, body: Any, path: str) -> None:
    assert response.status_code < 500, (body, response.status_code, response.text)
    if response.status_code != 200:
        error = response.json()
        assert error["type"] == "error" and set(error["error"]) == {"type", "message"}, response.text
        assert error["error"]["message"], response.text
        return
    if path.endswith("count_tokens"):
        assert response.json()["input_tokens"] > 0, response.text
    elif response.headers["content-type"].startswith("text/event-stream"):
        names = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
        assert names[0] == "message_start" and names[-1] == "message_stop" and "error" not in names, response.text
    else:
        reply = response.json()
        assert reply["type"] == "message" and reply["stop_reason"] in (
            "end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"), reply


@FUZZ_SETTINGS
@given(body=messages_bodies(), path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]))
def test_fuzzed_messages_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any, path: str) -> None:
    live, client = fuzz_server
    if path.endswith("count_tokens") and isinstance(body, dict):
        body = {k: v for k, v in body.items() if k in MESSAGES_FIELDS and k not in (
            "max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata", "service_tier")}
    check_anthropic_reply(send(client, path, body), body, path)
    still_serving(client, live.url)
