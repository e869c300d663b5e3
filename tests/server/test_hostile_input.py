"""The hostile classes found against the faces added after OpenAI's chat (issue 41), each a 4xx naming the field
in the face's own error shape, never a 500; and who may read a stored response. Against the real app, engine and
uvicorn over the fake runtime (a ChatML template with tools)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.server.conftest import MODEL

SELF_REF = {"$ref": "#"}
SELF_DEFS = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}}


def post(client: httpx.Client, path: str, body: Any, key: str | None = None) -> httpx.Response:
    """Encoded by hand: a hostile client sends lone surrogates and NaN, which httpx's json= refuses."""
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
    return client.post(path, content=json.dumps(body, ensure_ascii=True).encode(), headers=headers)


def openai_error(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], response.text
    return error


def ollama_error(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    assert list(response.json()) == ["error"], response.text
    return response.json()["error"]


def anthropic_error(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, response.text
    return body["error"]["message"]


@pytest.fixture
def client(serve_fake):
    live = serve_fake(context_length=192, kv_capacity_tokens=2048)
    with httpx.Client(base_url=live.url, timeout=30) as http:
        yield http
        ok = http.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2,
                                                     "messages": [{"role": "user", "content": "still there?"}]})
        assert ok.status_code == 200, ok.text  # every case leaves the server serving


def ollama_chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize(("options", "field"), [
    ({"temperature": "hot"}, "options.temperature"), ({"seed": "1"}, "options.seed"), ({"seed": 1.5}, "options.seed"),
    ({"stop": 5}, "options.stop"), ({"stop": [1, 2]}, "options.stop"), ({"num_predict": True}, "options.num_predict"),
    ({"top_k": True}, "options.top_k"), ({"num_ctx": 2.5}, "options.num_ctx"),
])
def test_ollama_options_of_the_wrong_type_are_a_400_naming_the_option(client, options: dict, field: str) -> None:
    assert field in ollama_error(post(client, "/api/chat", ollama_chat(options=options)))
    assert field in ollama_error(post(client, "/api/generate", {"model": MODEL, "prompt": "hi", "stream": False,
                                                                "options": options}))


@pytest.mark.parametrize("tool", [{"type": "function", "function": {}},
                                  {"type": "function", "function": {"name": ""}},
                                  {"type": "function", "function": {"name": "f", "parameters": "object"}}])
def test_ollama_tools_are_checked_by_ollama_s_schema(client, tool: dict) -> None:
    assert "tools.0.function" in ollama_error(post(client, "/api/chat", ollama_chat(tools=[tool])))


def test_an_ollama_chat_of_too_many_messages_is_a_400_not_a_500(client) -> None:
    messages = [{"role": "user", "content": "x" * 1200}] * 2900  # ~3.4 MB, under the 4 MiB body limit
    message = ollama_error(post(client, "/api/chat", ollama_chat(messages=messages)))
    assert "2900 messages" in message and "2048" in message


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/responses", {"model": MODEL, "input": "hi", "metadata": {"\ud800": "x"}}, "metadata"),
    ("/api/chat", ollama_chat(options={"\ud800": 1}), "options"),
    ("/v1/messages", {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "a\udfffb"}]},
     "messages.0.content"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "nul \x00 here"}]},
     "messages.0.content"),
])
def test_lone_surrogates_and_nul_anywhere_keys_included_are_a_400_naming_where(client, path: str, body: dict,
                                                                                 field: str) -> None:
    response = post(client, path, body)
    assert response.status_code == 400, response.text
    assert field in response.text and ("surrogate" in response.text or "NUL" in response.text), response.text


DEEP = "[" * 5000 + "1" + "]" * 5000  # JSON nested 5000 deep (Python's own encoder cannot even write it)


@pytest.mark.parametrize("depth", [65, 5000])
def test_deep_nesting_is_a_400_on_every_face(client, depth: int) -> None:
    deep = "[" * depth + "1" + "]" * depth
    for path, body, error in (("/v1/chat/completions", {"model": MODEL}, lambda r: openai_error(r)["message"]),
                              ("/api/chat", ollama_chat(), ollama_error),
                              ("/v1/messages", {"model": MODEL, "max_tokens": 2}, anthropic_error)):
        text = json.dumps({**body, "format": "DEEP"}).replace('"DEEP"', deep)
        response = client.post(path, content=text.encode(), headers={"content-type": "application/json"})
        assert "nests JSON deeper than 64 levels" in error(response), response.text


def test_tool_call_arguments_nested_thousands_deep_in_a_string_are_answered(client) -> None:
    """The arguments are JSON text: too deep for Python to decode, they reach the template as the text they are."""
    arguments = DEEP
    items = [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"}, {"role": "user", "content": "and?"}]
    response = post(client, "/v1/responses", {"model": MODEL, "input": items, "max_output_tokens": 2, "store": False})
    assert response.status_code in (200, 400), response.text
    chat = post(client, "/v1/chat/completions", {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "f", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})
    assert chat.status_code in (200, 400), chat.text


REQUIRED_SELF = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}


@pytest.mark.parametrize("schema", [SELF_REF, SELF_DEFS, REQUIRED_SELF], ids=["ref-root", "ref-defs", "required-self"])
def test_schemas_that_admit_no_output_are_a_400_on_every_face(client, schema: dict) -> None:
    chat = openai_error(post(client, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}))
    assert chat["param"] == "response_format.json_schema.schema" and "admits no" in chat["message"]
    responses = openai_error(post(client, "/v1/responses", {
        "model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "name": "s", "schema": schema}}}))
    assert responses["param"] == "text.format.schema"
    assert "admits no" in anthropic_error(post(client, "/v1/messages", {
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}}}))
    assert "admits no" in ollama_error(post(client, "/api/chat", ollama_chat(format=schema)))
    forced = openai_error(post(client, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}))
    assert forced["param"] == "tools" and "admits no" in forced["message"]


def test_a_500_carries_a_request_id_that_finds_it_in_the_log(serve_fake, caplog) -> None:
    from fastapi import APIRouter

    broken = APIRouter()

    @broken.get("/v1/broken")
    async def boom() -> None:
        raise RuntimeError("a bug")

    from edgeopt.server.app import create_app
    from edgeopt.server.state import ServerSettings
    from fastapi.testclient import TestClient
    from tests.fixtures.fake_runtime import FakeRuntime
    from tests.server.conftest import fake_served_model

    app = create_app(ServerSettings(model_names=(MODEL,)), served=fake_served_model(FakeRuntime()),
                     extra_routers=[broken])
    with TestClient(app, raise_server_exceptions=False) as http:
        response = http.get("/v1/broken")
    request_id = response.headers["x-request-id"]
    assert response.status_code == 500 and f"request id {request_id}" in response.json()["error"]["message"]
    assert any(request_id in record.getMessage() for record in caplog.records)


KEYS = {"alice": "alice-key-123", "bob": "bob-key-4567"}
ADMIN = "admin-key-890"


@pytest.fixture
def tenants(serve_fake):
    live = serve_fake(context_length=192, kv_capacity_tokens=2048, step_delay_s=0.02,  # a stream lasts ~3 s
                      settings={"api_keys": KEYS, "admin_key": ADMIN})
    with httpx.Client(base_url=live.url, timeout=30) as http:
        yield http


def test_a_stored_response_belongs_to_the_key_that_made_it(tenants) -> None:
    made = post(tenants, "/v1/responses", {"model": MODEL, "input": "my secret is 42", "max_output_tokens": 3},
                KEYS["alice"])
    assert made.status_code == 200, made.text
    rid = made.json()["id"]
    assert tenants.get(f"/v1/responses/{rid}", headers={"authorization": f"Bearer {KEYS['alice']}"}).status_code == 200
    for key in (KEYS["bob"], ADMIN):  # not even the operator reads a caller's responses
        headers = {"authorization": f"Bearer {key}"}
        assert openai_error(tenants.get(f"/v1/responses/{rid}", headers=headers), 404)["param"] is None
        continued = post(tenants, "/v1/responses", {"model": MODEL, "input": "and?", "previous_response_id": rid}, key)
        assert openai_error(continued, 404)["param"] == "previous_response_id"
        assert tenants.delete(f"/v1/responses/{rid}", headers=headers).status_code == 404
    unknown = tenants.get("/v1/responses/resp_nope", headers={"authorization": f"Bearer {KEYS['bob']}"})
    other = tenants.get(f"/v1/responses/{rid}", headers={"authorization": f"Bearer {KEYS['bob']}"})
    assert unknown.json()["error"]["message"].replace("resp_nope", rid) == other.json()["error"]["message"]
    assert tenants.get(f"/v1/responses/{rid}", headers={"authorization": f"Bearer {KEYS['alice']}"}).status_code == 200


def test_request_ids_on_the_monitoring_routes_are_the_admin_s_only(tenants) -> None:
    import threading

    stream_started = threading.Event()

    def long_request() -> None:
        with tenants.stream("POST", "/v1/chat/completions", headers={"authorization": f"Bearer {KEYS['alice']}"},
                            json={"model": MODEL, "stream": True, "max_tokens": 120,
                                  "messages": [{"role": "user", "content": "go on"}]}) as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                stream_started.set()

    worker = threading.Thread(target=long_request)
    worker.start()
    try:
        assert stream_started.wait(30)
        seen_by_bob = tenants.get("/v1/edgeopt/requests", headers={"authorization": f"Bearer {KEYS['bob']}"}).json()
        seen_by_admin = tenants.get("/v1/edgeopt/requests", headers={"authorization": f"Bearer {ADMIN}"}).json()
    finally:
        worker.join(60)
    assert seen_by_bob["requests"], (seen_by_bob, seen_by_admin)
    assert all("request_id" not in row for row in seen_by_bob["requests"])
    assert all(row["request_id"].startswith("chatcmpl-") for row in seen_by_admin["requests"])
    refused = tenants.delete("/v1/edgeopt/cache", headers={"authorization": f"Bearer {KEYS['bob']}"})
    assert openai_error(refused, 403)["type"] == "permission_error"
    assert tenants.delete("/v1/edgeopt/cache", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 200


def test_a_key_given_to_two_callers_is_refused_at_start() -> None:
    from edgeopt.errors import ConfigError
    from edgeopt.server.http.callers import keyring

    with pytest.raises(ConfigError, match="'bob' is also the key of 'alice'"):
        keyring(None, {"alice": "same-key-1", "bob": "same-key-1"}, None)


def test_the_official_clients_read_these_errors(serve_fake) -> None:
    import anthropic
    import ollama
    import openai

    live = serve_fake(context_length=192, kv_capacity_tokens=2048)
    with pytest.raises(openai.BadRequestError) as chat:
        openai.OpenAI(base_url=f"{live.url}/v1", api_key="none").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SELF_REF}})
    assert chat.value.param == "response_format.json_schema.schema" and "admits no" in chat.value.message
    with pytest.raises(anthropic.BadRequestError) as messages:
        anthropic.Anthropic(base_url=live.url, api_key="none").messages.create(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}],
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": REQUIRED_SELF}}})
    assert "admits no" in messages.value.message
    with pytest.raises(ollama.ResponseError) as chat_ollama:
        ollama.Client(host=live.url).chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                          options={"temperature": "hot"})
    assert chat_ollama.value.status_code == 400 and "options.temperature" in chat_ollama.value.error


def test_an_overlong_model_name_is_not_echoed_back_whole(client) -> None:
    name = "m" * 1_000_000
    for path, body in (("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "hi"}]}),
                       ("/api/chat", {**ollama_chat(), "model": name})):
        response = post(client, path, body)
        assert response.status_code == 404 and len(response.content) < 2000, response.text[:300]
        assert "1000000 characters" in response.text
