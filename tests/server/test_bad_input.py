"""Bad requests get OpenAI-style 4xx bodies that name the problem, and the server keeps serving."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(120)


def post(live, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{live.url}{path}", timeout=30, **kwargs)


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def assert_still_serving(live) -> None:
    ok = post(live, "/v1/completions", json={"model": MODEL, "prompt": "ok", "max_tokens": 2})
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] == 2


CASES = [
    # (description, body, expected status, expected param, words the message must contain)
    ("wrong type", {"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens", ["'ten'"]),
    ("max_tokens < 1", {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens", ["0"]),
    ("n > 1", {"model": MODEL, "prompt": "x", "n": 3}, 400, "n", ["n=1"]),
    ("unknown parameter", {"model": MODEL, "prompt": "x", "tools": []}, 400, "tools", ["not supported"]),
    ("logprobs range", {"model": MODEL, "prompt": "x", "logprobs": 50}, 400, "logprobs", ["50", "0..20"]),
    ("response_format type", {"model": MODEL, "prompt": "x", "response_format": {"type": "yaml"}}, 400,
     "response_format.type", ["yaml"]),
    ("missing prompt", {"model": MODEL}, 400, "prompt", ["missing"]),
    ("temperature range", {"model": MODEL, "prompt": "x", "temperature": 9}, 400, "temperature", ["9"]),
    ("bad token id", {"model": MODEL, "prompt": [1, 99999]}, 400, "prompt", ["99999"]),
    ("bad logit_bias", {"model": MODEL, "prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias", ["abc"]),
    ("unknown model", {"model": "gpt-17", "prompt": "x"}, 404, "model", ["gpt-17", MODEL]),
]


@pytest.mark.parametrize("description,body,status,param,words", CASES, ids=[c[0] for c in CASES])
def test_bad_completion_requests(serve_fake, description, body, status, param, words):
    live = serve_fake()
    response = post(live, "/v1/completions", json=body)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["param"] == param
    for word in words:
        assert word in error["message"], error["message"]
    assert_still_serving(live)


def test_malformed_json_and_non_object_bodies(serve_fake):
    live = serve_fake()
    broken = post(live, "/v1/chat/completions", content=b'{"model": "x", "messages": [',
                  headers={"content-type": "application/json"})
    assert broken.status_code == 400
    assert "not valid JSON" in error_of(broken)["message"]
    listed = post(live, "/v1/chat/completions", json=[1, 2])
    assert listed.status_code == 400
    error_of(listed)
    assert_still_serving(live)


def test_prompt_longer_than_context_names_both_numbers(serve_fake):
    live = serve_fake(context_length=64, kv_capacity_tokens=256)
    prompt = "y" * 100  # byte tokenizer: 100 bytes + BOS = 101 tokens
    response = post(live, "/v1/completions", json={"model": MODEL, "prompt": prompt})
    assert response.status_code == 400
    message = error_of(response)["message"]
    assert "101" in message and "64" in message, message
    too_long_output = post(live, "/v1/completions", json={"model": MODEL, "prompt": "y", "max_tokens": 100})
    assert too_long_output.status_code == 400
    error = error_of(too_long_output)
    assert error["param"] == "max_tokens" and "64" in error["message"] and "100" in error["message"]
    assert_still_serving(live)


def test_chat_errors(serve_fake):
    live = serve_fake()
    bad_role = post(live, "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "wizard",
                                                                                          "content": "x"}]})
    assert bad_role.status_code == 400 and error_of(bad_role)["param"] == "messages.0.role"
    empty = post(live, "/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert empty.status_code == 400 and error_of(empty)["param"] == "messages"
    logprobs = post(live, "/v1/chat/completions", json={"model": MODEL, "top_logprobs": 2,
                                                         "messages": [{"role": "user", "content": "x"}]})
    assert logprobs.status_code == 400 and error_of(logprobs)["param"] == "top_logprobs"
    no_schema = post(live, "/v1/chat/completions", json={"model": MODEL, "response_format": {"type": "json_schema"},
                                                          "messages": [{"role": "user", "content": "x"}]})
    assert no_schema.status_code == 400 and error_of(no_schema)["param"] == "response_format.json_schema"
    assert_still_serving(live)


def test_unknown_route_and_method(serve_fake):
    live = serve_fake()
    missing = httpx.get(f"{live.url}/v1/nothing-here")
    assert missing.status_code == 404 and "/v1/nothing-here" in error_of(missing)["message"]
    wrong_method = httpx.get(f"{live.url}/v1/completions")
    assert wrong_method.status_code == 405
    error_of(wrong_method)


def test_oversized_body_is_refused_before_parsing(serve_fake):
    live = serve_fake(max_body_bytes=10_000)
    response = post(live, "/v1/completions", json={"model": MODEL, "prompt": "z" * 20_000})
    assert response.status_code == 413
    assert "10000" in error_of(response)["message"]

    def chunked():  # no Content-Length: the limit must hold while the body streams in
        yield b'{"model": "fake-model", "prompt": "'
        for _ in range(30):
            yield b"z" * 1000
        yield b'"}'

    streamed = post(live, "/v1/completions", content=chunked(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert_still_serving(live)


def test_api_key_is_required_on_v1_routes_only(serve_fake):
    live = serve_fake(api_key="s3cret")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
    missing = post(live, "/v1/completions", json=body)
    assert missing.status_code == 401 and error_of(missing)["type"] == "authentication_error"
    wrong = post(live, "/v1/completions", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(f"{live.url}/v1/models").status_code == 401
    right = post(live, "/v1/completions", json=body, headers={"Authorization": "Bearer s3cret"})
    assert right.status_code == 200
    assert httpx.get(f"{live.url}/health").status_code == 200
    assert httpx.get(f"{live.url}/metrics").status_code == 200
