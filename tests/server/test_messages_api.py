"""/v1/messages and /v1/messages/count_tokens over the real app and engine (the deterministic fake runtime,
a ChatML template), driven by the official ``anthropic`` client: replies, streams parsed by the client's
own typed models, Anthropic-shaped errors, both ways of sending the key, and the API headers.

Tool calls, thinking and a real template are tested against served GGUF bundles in test_anthropic_client.py.
"""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(120)
HELLO = [{"role": "user", "content": "Hello"}]
GREEDY = {"temperature": 0.0}  # this client no longer has the parameter; the API still takes it


@pytest.fixture
def live(serve_fake):
    return serve_fake(context_length=512)


def _client(live, **kwargs) -> anthropic.Anthropic:
    kwargs.setdefault("api_key", "unused")
    return anthropic.Anthropic(base_url=live.url, max_retries=0, timeout=30, **kwargs)


def test_a_reply_has_anthropic_s_shape_and_counts(live) -> None:
    client = _client(live)
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    reply = client.messages.create(model=MODEL, max_tokens=12, messages=HELLO, system=system,
                                   metadata={"user_id": "u1"}, extra_body=GREEDY)
    assert reply.type == "message" and reply.role == "assistant" and reply.model == MODEL
    assert reply.id.startswith("msg_") and reply.stop_reason == "max_tokens" and reply.stop_sequence is None
    [block] = reply.content
    assert block.type == "text" and block.text
    counted = client.messages.count_tokens(model=MODEL, messages=HELLO, system=system)
    usage = reply.usage
    assert usage.output_tokens == 12
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens > 0


def test_system_as_a_string_or_blocks_is_the_same_prompt(live) -> None:
    client = _client(live)
    as_text = client.messages.count_tokens(model=MODEL, messages=HELLO, system="Be brief.")
    as_blocks = client.messages.count_tokens(model=MODEL, messages=HELLO,
                                             system=[{"type": "text", "text": "Be brief."}])
    bare = client.messages.count_tokens(model=MODEL, messages=HELLO)
    assert as_text.input_tokens == as_blocks.input_tokens > bare.input_tokens


def test_a_stream_is_what_the_client_rebuilds_and_equals_the_whole_reply(live) -> None:
    client = _client(live)
    ask = dict(model=MODEL, max_tokens=20, messages=HELLO, extra_body=GREEDY)
    whole = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_start" in kinds
    assert kinds.index("message_delta") == len(kinds) - 2  # then message_stop; text events in between
    assert final.content[0].text == whole.content[0].text and final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens == 20
    raw = httpx.post(f"{live.url}/v1/messages", json={"model": MODEL, "max_tokens": 4, "messages": HELLO,
                                                      "stream": True}).text
    assert "event: ping" in raw and raw.startswith("event: message_start\n")


def test_a_stop_sequence_is_reported_as_the_reason(live) -> None:
    client = _client(live)
    free = client.messages.create(model=MODEL, max_tokens=40, messages=HELLO, extra_body=GREEDY).content[0].text
    stop = free[5:7]  # a piece of what the model writes at temperature 0
    reply = client.messages.create(model=MODEL, max_tokens=40, messages=HELLO, extra_body=GREEDY, stop_sequences=[stop])
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == stop
    assert reply.content[0].text == free[:free.index(stop)]
    with client.messages.stream(model=MODEL, max_tokens=40, messages=HELLO, extra_body=GREEDY,
                                stop_sequences=[stop]) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "stop_sequence" and streamed.stop_sequence == stop


def test_errors_are_anthropic_shaped(live) -> None:
    client = _client(live)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=0, messages=HELLO)
    assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in bad.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="claude-opus-4", max_tokens=4, messages=HELLO)
    assert "claude-opus-4" in unknown.value.body["error"]["message"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    for body, named in [({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [image]}]},
                         "images are not supported"),
                        ({"model": MODEL, "max_tokens": 4, "messages": HELLO, "tools": [
                            {"type": "web_search_20250305", "name": "web_search"}]}, "web_search_20250305"),
                        ({"model": MODEL, "max_tokens": 4, "messages": HELLO, "tool_choice": {"type": "any"}},
                         "no tools"),
                        ({"model": MODEL, "max_tokens": 4,
                          "messages": [*HELLO, {"role": "assistant", "content": "Hi"}]}, "prefilled"),
                        ({"model": MODEL, "max_tokens": 4, "messages": HELLO, "top_k": "x"}, "top_k")]:
        response = httpx.post(f"{live.url}/v1/messages", json=body)
        assert response.status_code == 400, response.text
        error = response.json()
        assert error["type"] == "error" and named in error["error"]["message"], error
    assert httpx.post(f"{live.url}/v1/messages/count_tokens", content=b"{").json()["type"] == "error"


def test_the_key_may_come_as_x_api_key_or_bearer_and_headers_are_accepted(serve_fake) -> None:
    live = serve_fake(api_key="sekrit")
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    by_key = _client(live, api_key="sekrit", default_headers=headers)
    assert by_key.messages.create(model=MODEL, max_tokens=2, messages=HELLO).usage.output_tokens == 2
    by_token = anthropic.Anthropic(base_url=live.url, auth_token="sekrit", max_retries=0)
    assert by_token.messages.count_tokens(model=MODEL, messages=HELLO).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError) as refused:
        _client(live, api_key="wrong").messages.create(model=MODEL, max_tokens=2, messages=HELLO)
    assert refused.value.body["error"]["type"] == "authentication_error"
    openai_shaped = httpx.post(f"{live.url}/v1/chat/completions", json={}).json()
    assert set(openai_shaped["error"]) == {"message", "type", "param", "code"}  # other routes keep OpenAI's


def test_a_request_shaped_like_claude_code_s_is_served(serve_fake) -> None:
    """What Claude Code sends (its query, headers, cached system blocks, a $schema in tool schemas, its
    metadata, thinking, context_management, and max_tokens=32000 whatever the context): served, the reply
    stopping where the context ends, as Anthropic's API now does."""
    live = serve_fake(context_length=1024)
    tools = [{"name": "Bash", "description": "Run a command", "input_schema": {
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
        "properties": {"command": {"type": "string"}}, "required": ["command"]},
        "cache_control": {"type": "ephemeral"}}]
    body = {"model": MODEL, "max_tokens": 32000, "stream": True, "temperature": 1,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral",
                                                                                            "ttl": "1h"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "<reminder>be brief</reminder>"},
                                                      {"type": "text", "text": "list files",
                                                       "cache_control": {"type": "ephemeral"}}]}],
            "tools": tools, "metadata": {"user_id": "user_1_account_2_session_3"},
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}
    headers = {"anthropic-version": "2023-06-01", "x-app": "cli", "anthropic-dangerous-direct-browser-access": "true",
               "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                                 "fine-grained-tool-streaming-2025-05-14"}
    response = httpx.post(f"{live.url}/v1/messages?beta=true", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert '"stop_reason":"model_context_window_exceeded"' in response.text
    counted = httpx.post(f"{live.url}/v1/messages/count_tokens?beta=true", headers=headers, json={
        k: v for k, v in body.items() if k not in ("max_tokens", "stream", "temperature", "metadata")}).json()
    as_sdk_args = {k: v for k, v in body.items() if k not in ("stream", "temperature", "context_management")}
    usage = _client(live).messages.create(**as_sdk_args, extra_body={"context_management": {}}).usage
    assert counted["input_tokens"] == usage.input_tokens + usage.cache_read_input_tokens
    assert counted["input_tokens"] + usage.output_tokens == 1024  # the whole context, every token of it used
