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
    for body, named in [({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]},
                         "images are not supported"),
                        ({"model": MODEL, "max_tokens": 4, "messages": HELLO, "tools": [
                            {"type": "web_search_20250305", "name": "web_search"}]}, "web_search_20250305"),
                        ({"model": MODEL, "max_tokens": 4, "messages": HELLO, "tool_choice": {"type": "any"}},
                         "no tools"),
                        ({"model": MODEL, "max_tokens": 4, "messages": [*HELLO, {"role": "assistant", "content": "Hi"}]},
                         "prefilled"),
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
