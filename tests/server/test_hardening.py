"""Issue 12, items 1, 3, 7 and 9: exactly the requests of the report, each with the answer it now gets,
and the server still serving after each one."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from edgeopt.server.app import create_app
from edgeopt.server.state import ServerSettings
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import MODEL, fake_served_model
from tests.server.live import LiveServer, start_live_server
from tests.server.test_bad_input import assert_still_serving, error_of

pytestmark = pytest.mark.timeout(120)


def post_raw(live: LiveServer, path: str, body: Any) -> httpx.Response:
    """Send ``body`` as JSON text the way a hostile client may: NaN/Infinity and lone surrogates allowed."""
    text = json.dumps(body, ensure_ascii=True, allow_nan=True)
    return httpx.post(f"{live.url}{path}", content=text.encode(), timeout=30,
                      headers={"content-type": "application/json"})


def refused(response: httpx.Response, param: str | None, *words: str) -> dict:
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param, error
    for word in words:
        assert word in error["message"], error["message"]
    return error


@pytest.fixture
def live(serve_fake) -> LiveServer:
    return serve_fake()


# --- item 1: one accepted request stopped all generation ------------------------------------------------


def test_item1_tiny_temperature_with_min_p_is_answered_and_the_engine_lives(live: LiveServer) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 5, "temperature": 5e-324, "min_p": 0.1}
    response = post_raw(live, "/v1/completions", body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "length" and response.json()["usage"]["completion_tokens"] == 5
    greedy = post_raw(live, "/v1/completions", {**body, "temperature": 0})
    assert greedy.json()["choices"][0]["text"] == choice["text"]  # the limit of temperature -> 0 is greedy
    assert httpx.get(f"{live.url}/health").json()["status"] == "ok"
    assert_still_serving(live)


def test_item1_tiny_repetition_penalty_is_refused_by_range(live: LiveServer) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 5, "repetition_penalty": 5e-324, "min_p": 0.05}
    refused(post_raw(live, "/v1/completions", body), "repetition_penalty", "5e-324", "[0.01, 100]")
    assert_still_serving(live)


class FailingRuntime(FakeRuntime):
    """Fails every step that feeds a "~" (the test's trigger); serves anything else."""

    def step(self, batch):  # type: ignore[no-untyped-def]
        if any(ord("~") in item.tokens for item in batch):
            raise RuntimeError("device lost")
        return super().step(batch)


class DyingRuntime(FakeRuntime):
    def step(self, batch):  # type: ignore[no-untyped-def]
        raise SystemExit("interpreter is going away")  # a BaseException: the engine thread cannot go on


def serve(runtime: FakeRuntime) -> LiveServer:
    app = create_app(ServerSettings(model_names=(MODEL,)), served=fake_served_model(runtime))
    live = start_live_server(app)
    live.runtime = runtime
    return live


def test_a_failed_step_is_a_500_or_a_final_sse_error_and_the_server_keeps_serving() -> None:
    live = serve(FailingRuntime())
    try:
        body = {"model": MODEL, "prompt": "boom~", "max_tokens": 4}
        failed = post_raw(live, "/v1/completions", body)
        assert failed.status_code == 500 and "device lost" in error_of(failed)["message"]
        stream = post_raw(live, "/v1/completions", {**body, "stream": True})
        assert stream.status_code == 200
        events = [line.removeprefix("data: ") for line in stream.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["type"] == "server_error" and "device lost" in events[-2]
        assert httpx.get(f"{live.url}/health").status_code == 200
        assert_still_serving(live)
    finally:
        live.stop()


def test_health_is_503_with_the_reason_when_the_engine_thread_is_gone() -> None:
    live = serve(DyingRuntime())
    try:
        failed = post_raw(live, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert failed.status_code == 500, failed.text
        live.state.served.engine._thread.join(timeout=10)
        health = httpx.get(f"{live.url}/health")
        assert health.status_code == 503
        assert "engine thread is not running" in health.json()["error"] and "SystemExit" in health.json()["error"]
        refused_now = post_raw(live, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert refused_now.status_code == 503 and "engine thread" in error_of(refused_now)["message"]
    finally:
        live.stop()


# --- item 3: 500 instead of 400 ----------------------------------------------------------------------


def test_item3_negative_seed_is_an_int64_seed_and_past_int64_is_refused(live: LiveServer) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 6, "seed": -1}
    first, again = post_raw(live, "/v1/completions", body), post_raw(live, "/v1/completions", body)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["text"] == again.json()["choices"][0]["text"]  # a seed like any other
    other = post_raw(live, "/v1/completions", {**body, "seed": 2**64 - 1})  # not an alias of -1
    assert other.status_code == 400
    refused(other, "seed", str(2**64 - 1), "64-bit signed integer")
    assert_still_serving(live)


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"model": MODEL, "prompt": "\ud800"}, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": ["ok", "\ud800"]}, "prompt.1"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "stop": ["\udfff"]}, "stop.0"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi \ud800"}]},
     "messages.0.content"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]}, "messages.0.content.0.text"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x", "name": "\ud800"}]},
     "messages.0.name"),
    ("/v1/completions", {"model": "\ud800", "prompt": "x"}, "model"),
], ids=["prompt", "prompt-list", "stop", "message", "text-part", "message-extra", "model"])
def test_item3_lone_surrogate_is_a_400_naming_the_field(live: LiveServer, path: str, body: dict,
                                                        param: str) -> None:
    refused(post_raw(live, path, body), param, "lone UTF-16 surrogate", "not valid Unicode")
    assert_still_serving(live)


# --- item 7: misleading errors -----------------------------------------------------------------------


def test_item7_stop_token_ids_out_of_vocabulary_names_stop_token_ids(live: LiveServer) -> None:
    body = {"model": MODEL, "prompt": "x", "stop_token_ids": [99999]}
    refused(post_raw(live, "/v1/completions", body), "stop_token_ids", "99999", "0..257")


def test_item7_empty_body_says_so(live: LiveServer) -> None:
    response = httpx.post(f"{live.url}/v1/completions", content=b"", headers={"content-type": "application/json"})
    error = refused(response, None, "request body is empty", "JSON object")
    assert "None" not in error["message"]


def test_item7_malformed_json_names_line_and_column_not_a_param(live: LiveServer) -> None:
    broken = b'{"model": "fake-model",\n "prompt": "x",,}'
    response = httpx.post(f"{live.url}/v1/completions", content=broken, headers={"content-type": "application/json"})
    with pytest.raises(json.JSONDecodeError) as reference:  # where Python's own parser puts the error
        json.loads(broken)
    refused(response, None, "not valid JSON", f"line {reference.value.lineno} column {reference.value.colno}")
    assert_still_serving(live)


def test_item7_image_part_is_refused_as_unsupported_media(live: LiveServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}
    refused(post_raw(live, "/v1/chat/completions", body), "messages.1.content.1",
            "images are not supported by this model")
    assert_still_serving(live)


# --- item 9: degenerate values -----------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("field,value,words", [
    ("temperature", INF, ["temperature=inf", "[0, 2]"]),
    ("temperature", NAN, ["temperature=nan"]),
    ("temperature", -INF, ["temperature=-inf"]),
    ("repetition_penalty", 5e-324, ["repetition_penalty=5e-324", "[0.01, 100]"]),
    ("repetition_penalty", INF, ["repetition_penalty=inf"]),
    ("presence_penalty", INF, ["presence_penalty=inf", "[-2, 2]"]),
    ("frequency_penalty", -INF, ["frequency_penalty=-inf"]),
    ("top_p", NAN, ["top_p=nan", "(0, 1]"]),
    ("min_p", INF, ["min_p=inf"]),
    ("logit_bias", {"\u0661\u0662": 5}, ["'\u0661\u0662'", "ASCII digits"]),  # Arabic-Indic "12"
    ("logit_bias", {"12": INF}, ["logit_bias[12]=inf", "[-100, 100]"]),
    ("logit_bias", {"9" * 5000: 1}, ["5000 characters", "256"]),  # refused at the door (edgeopt.server.http.json_body)
    ("stop", ["a", "b", "c", "d", "e"], ["at most 4"]),
])
def test_item9_degenerate_values_are_refused_naming_the_range(live: LiveServer, field: str, value: Any,
                                                              words: list[str]) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 3, field: value}
    refused(post_raw(live, "/v1/completions", body), field, *words)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3, field: value}
    refused(post_raw(live, "/v1/chat/completions", chat), field, *words)


@pytest.mark.parametrize("field,value", [("temperature", 5e-324), ("presence_penalty", 5e-324),
                                         ("frequency_penalty", -5e-324), ("top_p", 5e-324), ("min_p", 5e-324),
                                         ("repetition_penalty", 0.01), ("top_k", 2**70)])
def test_item9_tiny_and_huge_values_inside_the_range_are_honoured(live: LiveServer, field: str,
                                                                  value: float) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 3, field: value}
    response = post_raw(live, "/v1/completions", body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 3


def test_item3_lone_surrogate_in_embeddings_input_is_a_400() -> None:
    """Same bug class on /v1/embeddings: refused while the body is parsed, before any model runs."""
    from edgeopt.server.state import ServedModel

    app = create_app(ServerSettings(model_names=(MODEL,), kind="embedding"),
                     served=ServedModel(context_length=8, tokenizer=None))
    live = start_live_server(app)
    try:
        for body, param in [({"model": MODEL, "input": "a\ud800"}, "input"),
                            ({"model": MODEL, "input": ["ok", "\udfff"]}, "input.1"),
                            ({"model": "\ud800", "input": "x"}, "model")]:
            refused(post_raw(live, "/v1/embeddings", body), param, "lone UTF-16 surrogate")
    finally:
        live.stop()


# --- issue 16: a request is validated once, in edgeopt.engine.validation -------------------------------


def test_issue16_sampling_and_prompt_are_validated_once_per_request(live: LiveServer, monkeypatch) -> None:
    """The chat core only converts; Engine.add_request applies the ranges, once, for every caller."""
    from edgeopt.engine import validation

    calls: list[float] = []

    class CountingRange(validation.FloatRange):  # every range check of temperature, by whoever runs it
        def contains(self, value: float) -> bool:
            calls.append(value)
            return super().contains(value)

    monkeypatch.setitem(validation.SAMPLING_RANGES, "temperature", CountingRange(0.0, 2.0))
    for path, extra in [("/v1/completions", {"prompt": "Hello"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})]:
        ok = post_raw(live, path, {"model": MODEL, "max_tokens": 2, "temperature": 0.5, **extra})
        assert ok.status_code == 200, ok.text
    assert calls == [0.5, 0.5]  # one check per request


@pytest.mark.parametrize("path,extra", [("/v1/completions", {"prompt": "Hello"}),
                                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})])
def test_issue16_bad_stop_token_id_names_stop_token_ids(live: LiveServer, path: str, extra: dict) -> None:
    body = {"model": MODEL, "max_tokens": 2, "stop_token_ids": [1, 10**9], **extra}
    refused(post_raw(live, path, body), "stop_token_ids", "stop_token_ids token id 1000000000",
            "outside the vocabulary")
    assert_still_serving(live)


def test_issue16_prompt_ids_outside_the_vocabulary_are_refused_by_the_engine(live: LiveServer) -> None:
    refused(post_raw(live, "/v1/completions", {"model": MODEL, "prompt": [1, 10**9], "max_tokens": 2}),
            "prompt", "prompt token id 1000000000 is outside the vocabulary")
    assert_still_serving(live)
