"""Fields real clients send (issue 13, item 4), through the official ``openai`` client on the fake runtime:
each is accepted and either honoured or, where it means nothing for a local server, ignored, as the
README's list says; a value we cannot honour (n > 1) is still refused with a precise message."""

from __future__ import annotations

import openai
import pytest

from tests.server.conftest import MODEL

IGNORED = dict(store=True, metadata={"trace": "abc"}, service_tier="auto", user="u-1", prompt_cache_key="k",
               safety_identifier="s", reasoning_effort="low", parallel_tool_calls=False)
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client(serve_fake) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{serve_fake().url}/v1", api_key="unused", max_retries=0)


def test_ignored_fields_are_accepted_and_change_nothing(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0)
    # parallel_tool_calls without tools, reasoning_effort on a model that does not reason: no effect.
    sent = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0,
                                          stream_options=None, **IGNORED)
    assert sent.choices[0].message.content == plain.choices[0].message.content


def test_max_completion_tokens_and_include_usage_are_honoured(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_completion_tokens=5, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 5 and reply.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model=MODEL, messages=HI, max_completion_tokens=5, stream=True,
                                                 stream_options={"include_usage": True,
                                                                 "include_obfuscation": False},
                                                 extra_body={"ignore_eos": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_frequency_and_presence_penalties_change_greedy_output(client: openai.OpenAI) -> None:
    ask = dict(model=MODEL, messages=HI, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    plain = client.chat.completions.create(**ask).choices[0].message.content
    for penalty in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}):
        penalized = client.chat.completions.create(**ask, **penalty).choices[0].message.content
        assert penalized != plain, penalty
        # a repeated character is what they penalize: fewer repeats than greedy alone
        assert len(set(penalized)) >= len(set(plain)), penalty


def test_n_above_one_is_still_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI, n=2)
    assert "n=1" in str(caught.value) and caught.value.body["param"] == "n"
