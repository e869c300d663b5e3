"""Fuzz Ollama's face (/api/chat, /api/generate) and the tokenizer routes (/tokenize, /detokenize) as
test_fuzz_requests.py fuzzes OpenAI's and Anthropic's: every field of the wire schema with valid values, values
past their ranges, wrong types, odd Unicode and hostile schemas. For every case: no 5xx, a 4xx is the face's own
error body, a 200 is a well-formed reply, and a normal request is still served right after."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.server.conftest import MODEL
from tests.server.test_fuzz_requests import (FUZZ_SETTINGS, GENERATION_FIELDS, any_json, fuzz_server, huge_ints,  # noqa: F401
                                             odd_floats, odd_text, plain_text, send, small_schemas, still_serving)

pytestmark = pytest.mark.timeout(300)

hostile_schemas = st.sampled_from([{"$ref": "#"}, {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
                                   {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
                                   {"type": "strin"}, {"pattern": "(?<=a)b", "type": "string"}])
option_values = st.one_of(odd_floats, huge_ints, any_json, st.booleans())
OPTIONS = {"temperature": st.floats(0, 2), "top_p": st.floats(0, 1), "top_k": st.integers(0, 100),
           "min_p": st.floats(0, 1), "seed": st.integers(0, 2**31), "repeat_penalty": st.floats(0.5, 2),
           "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
           "stop": st.one_of(plain_text.filter(bool), st.lists(plain_text.filter(bool), max_size=3)),
           "num_predict": st.sampled_from([-2, -1, 1, 3]), "num_ctx": st.integers(8, 192)}
options = st.one_of(
    st.fixed_dictionaries({}, optional=OPTIONS),
    st.dictionaries(st.one_of(st.sampled_from([*OPTIONS, "num_thread", "mirostat", "\ud800"]), odd_text), option_values,
                    max_size=3))
ollama_function = st.fixed_dictionaries({"name": st.sampled_from(["f", "get_weather"])},
                                        optional={"description": plain_text, "parameters": small_schemas})
ollama_tool = st.one_of(st.fixed_dictionaries({"type": st.just("function"), "function": ollama_function}),
                        st.fixed_dictionaries({"type": st.just("function"), "function": st.one_of(
                            any_json, st.fixed_dictionaries({"name": st.sampled_from(["", "f"]),
                                                             "parameters": st.one_of(hostile_schemas, any_json)}))}))
ollama_call = st.fixed_dictionaries({"function": st.fixed_dictionaries({"name": st.sampled_from(["f", "g"]),
                                                                         "arguments": st.dictionaries(plain_text,
                                                                                                      plain_text,
                                                                                                      max_size=2)})})
ollama_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": plain_text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": plain_text},
                          optional={"tool_calls": st.lists(ollama_call, max_size=2), "thinking": plain_text}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": plain_text},
                          optional={"tool_name": st.sampled_from(["f", "g"])}))
odd_message = st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["", "developer"]), any_json),
                                     "content": st.one_of(odd_text, any_json)},
                                    optional={"images": st.just(["AA=="]), "tool_calls": any_json})
SHARED = {
    "model": (st.sampled_from([MODEL, f"{MODEL}:latest", "alias"]), st.one_of(odd_text, any_json)),
    "stream": (st.booleans(), any_json),
    "format": (st.one_of(st.just("json"), st.just(""), small_schemas), st.one_of(hostile_schemas, odd_text, any_json)),
    "options": (options, any_json),
    "keep_alive": (st.sampled_from(["5m", 0, -1, 300]), any_json),
    "think": (st.sampled_from([False, None]), st.one_of(st.just(True), st.sampled_from(["low", "max"]), any_json)),
    "logprobs": (st.booleans(), any_json),
    "top_logprobs": (st.integers(0, 5), st.one_of(st.integers(-3, -1), st.integers(21, 40), huge_ints, any_json)),
    "unknown_field": (st.nothing(), any_json),
}
CHAT = {**SHARED, "messages": (st.lists(ollama_message, min_size=1, max_size=3),
                               st.one_of(st.lists(st.one_of(ollama_message, odd_message), min_size=1, max_size=3),
                                         any_json)),
        "tools": (st.lists(ollama_tool, max_size=2), any_json)}
GENERATE = {**SHARED, "prompt": (plain_text, st.one_of(odd_text, any_json)), "system": (plain_text, any_json),
            "raw": (st.booleans(), any_json), "context": (st.lists(st.integers(0, 257), max_size=4),
                                                          st.one_of(st.lists(huge_ints, min_size=1), any_json)),
            "suffix": (st.just(""), plain_text.filter(bool)), "template": (st.nothing(), odd_text),
            "images": (st.just([]), st.just(["AA=="]))}


@st.composite
def ollama_bodies(draw: st.DrawFn, required: str, fields: dict) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(any_json)
    chosen = draw(st.lists(st.sampled_from(sorted(set(fields) - {"model", required, "unknown_field"})), max_size=5,
                           unique=True))
    body = {name: draw(fields[name][0]) for name in ["model", required, *chosen]}
    body.setdefault("options", {})
    if isinstance(body["options"], dict):  # keep accepted generations short
        body["options"].setdefault("num_predict", 3)
    if draw(st.integers(0, 2)) > 0:
        victim = draw(st.sampled_from(["model", required, *chosen, "unknown_field"]))
        body[victim] = draw(fields[victim][1])
    return body


def check_ollama_reply(response: httpx.Response, body: Any) -> None:
    assert response.status_code < 500, (body, response.status_code, response.text)
    if response.status_code != 200:
        assert list(response.json()) == ["error"] and response.json()["error"], response.text
        return
    lines = [line for line in response.text.splitlines() if line]
    assert lines, response.text
    last = json.loads(lines[-1])
    assert "error" not in last and last["done"] is True, response.text


@FUZZ_SETTINGS
@given(body=ollama_bodies("messages", CHAT))
def test_fuzzed_ollama_chat_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any) -> None:
    live, client = fuzz_server
    check_ollama_reply(send(client, "/api/chat", body), body)
    still_serving(client, live.url)


@FUZZ_SETTINGS
@given(body=ollama_bodies("prompt", GENERATE))
def test_fuzzed_ollama_generate_never_5xx_and_the_server_keeps_serving(fuzz_server, body: Any) -> None:
    live, client = fuzz_server
    check_ollama_reply(send(client, "/api/generate", body), body)
    still_serving(client, live.url)


tokenize_bodies = st.one_of(
    st.fixed_dictionaries({}, optional={"content": st.one_of(plain_text, odd_text, any_json),
                                        "prompt": st.one_of(plain_text, any_json), "model": odd_text,
                                        "add_special": any_json, "parse_special": st.one_of(st.booleans(), any_json),
                                        "with_pieces": st.one_of(st.booleans(), any_json)}),
    any_json)
detokenize_bodies = st.one_of(st.fixed_dictionaries({"tokens": st.one_of(st.lists(st.integers(0, 257), max_size=8),
                                                                          st.lists(huge_ints, max_size=3), any_json)}),
                              any_json)


@FUZZ_SETTINGS
@given(body=st.one_of(tokenize_bodies.map(lambda b: ("/tokenize", b)),
                      detokenize_bodies.map(lambda b: ("/detokenize", b))))
def test_fuzzed_tokenizer_routes_never_5xx(fuzz_server, body: tuple[str, Any]) -> None:
    live, client = fuzz_server
    path, payload = body
    response = send(client, path, payload)
    assert response.status_code < 500, (payload, response.status_code, response.text)
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, response.text
    still_serving(client, live.url)
