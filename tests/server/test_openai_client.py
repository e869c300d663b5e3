"""The official openai client against a live server: chat, completions, streaming, usage, models."""

from __future__ import annotations

import httpx
import openai
import pytest

from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.server.chat.template import ChatTemplate
from tests.fixtures.fake_runtime import EOS_ID
from tests.server.conftest import MODEL

pytestmark = pytest.mark.timeout(120)


def client_for(live, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=api_key, max_retries=0, timeout=30)


def expected_greedy_text(runtime, prompt_ids: list[int], max_tokens: int) -> str:
    ids = [t for t in runtime.greedy_reference(prompt_ids, max_tokens) if t != EOS_ID]
    return runtime.tokenizer.decode(ids)


def test_completion_matches_the_models_greedy_output_and_counts_usage(serve_fake):
    live = serve_fake()
    result = client_for(live).completions.create(model=MODEL, prompt="Hello", max_tokens=12, temperature=0)
    prompt_ids = live.runtime.tokenizer.encode("Hello", add_special=True)
    assert result.choices[0].text == expected_greedy_text(live.runtime, prompt_ids, 12)
    assert result.choices[0].finish_reason == "length"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (len(prompt_ids), 12)
    assert result.usage.total_tokens == len(prompt_ids) + 12


def test_streamed_completion_equals_the_non_streamed_one(serve_fake):
    live = serve_fake()
    client = client_for(live)
    whole = client.completions.create(model=MODEL, prompt="abc", max_tokens=20, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=20, temperature=0, stream=True))
    assert len(chunks) > 2, "a 20-token completion should arrive in several chunks"
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 20


def test_a_stream_interval_sends_the_first_token_alone_and_the_held_ones_with_the_last(serve_fake):
    """With an interval longer than the request, the client sees the first token at once and everything else
    in the final chunk: the same text, usage, and one inter-token gap per token in /metrics."""
    live = serve_fake(engine=dict(stream_interval_s=3600.0))
    client = client_for(live)
    whole = client.completions.create(model=MODEL, prompt="abc", max_tokens=20, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=20, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) == 2 and chunks[-2].choices[0].finish_reason == "length"
    assert "".join(texts) == whole.choices[0].text and chunks[-1].usage.completion_tokens == 20
    itl = [line for line in httpx.get(f"{live.url}/metrics").text.splitlines()
           if line.startswith("edgeopt_inter_token_latency_seconds_count")]
    assert itl == [f"edgeopt_inter_token_latency_seconds_count {2 * 19}.0"]  # both requests: 19 gaps each


def test_chat_uses_the_template_and_reports_usage(serve_fake):
    live = serve_fake()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    result = client_for(live).chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                                      temperature=0)
    rendered = ChatTemplate(CHATML_TEMPLATE).render(messages)
    prompt_ids = live.runtime.tokenizer.encode(rendered, add_special=False)
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content == expected_greedy_text(live.runtime, prompt_ids, 6)
    assert result.usage.prompt_tokens == len(prompt_ids)
    assert result.usage.completion_tokens == 6
    assert result.object == "chat.completion" and result.model == MODEL


def test_chat_stream_with_include_usage(serve_fake):
    live = serve_fake()
    stream = client_for(live).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count"}], max_tokens=10, temperature=0,
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) == 10  # byte tokenizer, printable ASCII: one character per token
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_seeded_sampling_is_reproducible_and_alias_names_are_accepted(serve_fake):
    live = serve_fake()
    client = client_for(live)
    a = client.completions.create(model=MODEL, prompt="x", max_tokens=15, temperature=1.0, seed=7)
    b = client.completions.create(model="alias", prompt="x", max_tokens=15, temperature=1.0, seed=7)
    assert a.choices[0].text == b.choices[0].text


def test_stop_string_ends_generation_early(serve_fake):
    live = serve_fake()
    client = client_for(live)
    full = client.completions.create(model=MODEL, prompt="Hello", max_tokens=30, temperature=0).choices[0].text
    stop = full[5:7]
    cut = client.completions.create(model=MODEL, prompt="Hello", max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[:full.index(stop)]


def test_models_lists_the_served_model(serve_fake):
    live = serve_fake()
    models = client_for(live).models.list()
    assert [m.id for m in models.data] == [MODEL]
