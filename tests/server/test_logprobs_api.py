"""logprobs / top_logprobs (chat) and logprobs / echo (completions) in OpenAI's shapes, through the
official client, streaming and not (fake runtime: one byte per token, so texts and offsets are exact)."""

from __future__ import annotations

import math

import openai
import pytest

from tests.server.conftest import MODEL

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def client(serve_fake) -> openai.OpenAI:
    live = serve_fake()
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0)


def test_chat_logprobs_shape_and_consistency(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0.0,
                                           logprobs=True, top_logprobs=3)
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert len(content) == reply.usage.completion_tokens == 12
    assert "".join(entry.token for entry in content) == choice.message.content
    for entry in content:
        assert bytes(entry.bytes) == entry.token.encode()
        values = [top.logprob for top in entry.top_logprobs]
        assert len(values) == 3 and values == sorted(values, reverse=True)
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen token is the best
        assert entry.top_logprobs[0].logprob == entry.logprob <= 0.0
        assert math.fsum(math.exp(v) for v in values) <= 1.0 + 1e-9
    streamed = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0.0,
                                              logprobs=True, top_logprobs=3, stream=True)
    entries = [e for chunk in streamed if chunk.choices and chunk.choices[0].logprobs
               for e in chunk.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in content]


def test_logprobs_are_taken_after_logit_bias(client: openai.OpenAI) -> None:
    """OpenAI: logit_bias changes the reported logprobs. +100 on "x" makes it certain and chosen."""
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, temperature=0.0,
                                           logprobs=True, logit_bias={str(ord("x")): 100})
    assert reply.choices[0].message.content == "xxx"
    assert all(entry.logprob > -1e-6 and entry.top_logprobs == [] for entry in reply.choices[0].logprobs.content)


def test_chat_without_logprobs_has_none(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3)
    assert reply.choices[0].logprobs is None


@pytest.mark.parametrize(("fields", "param"), [({"top_logprobs": 2}, "top_logprobs"),
                                                ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")])
def test_bad_logprob_requests_are_400s_naming_the_field(client: openai.OpenAI, fields: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, **fields)
    assert caught.value.body["param"] == param


def test_completion_logprobs_legacy_shape_streaming_and_not(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=MODEL, prompt="abc", max_tokens=6, temperature=0.0, logprobs=2)
    choice = reply.choices[0]
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text and len(lp.tokens) == 6
    assert lp.text_offset == list(range(6))
    assert all(len(top) == 2 and max(top.values()) >= value for top, value in zip(lp.top_logprobs, lp.token_logprobs))
    streamed = client.completions.create(model=MODEL, prompt="abc", max_tokens=6, temperature=0.0, logprobs=2,
                                         stream=True)
    tokens, offsets = [], []
    for chunk in streamed:
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            offsets += chunk.choices[0].logprobs.text_offset
    assert tokens == lp.tokens and offsets == lp.text_offset


def test_completion_echo_with_and_without_logprobs(client: openai.OpenAI) -> None:
    plain = client.completions.create(model=MODEL, prompt="abc", max_tokens=4, temperature=0.0)
    echoed = client.completions.create(model=MODEL, prompt="abc", max_tokens=4, temperature=0.0, echo=True)
    assert echoed.choices[0].text == "abc" + plain.choices[0].text
    scored = client.completions.create(model=MODEL, prompt="abc", max_tokens=4, temperature=0.0, echo=True,
                                       logprobs=1)
    lp = scored.choices[0].logprobs
    # The fake tokenizer adds BOS (no text) before a, b, c: nothing scores BOS, the rest are scored.
    assert lp.tokens[1:4] == ["a", "b", "c"] and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0.0 for v in lp.token_logprobs[1:])
    assert lp.text_offset[:5] == [0, 0, 1, 2, 3]  # BOS adds no text
    assert "".join(lp.tokens[1:]) == scored.choices[0].text
