"""Reasoning items on /v1/responses: a served GGUF bundle whose tokenizer carries DeepSeek-R1-Distill-Qwen's
real thinking template (tests/fixtures/tool_chat_models.py), with the official openai client.

The thinking is split by the same reader as on chat completions (edgeopt.server.chat.reply), so the
judge is the chat reply to the same conversation and seed: its ``reasoning_content`` must be the reasoning
item's text, its ``content`` the message's. Streams are checked against the client's own event types,
with the thinking as ``reasoning_text`` content or, when a summary is asked for, as the summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live
from tests.server.responses_events import check_events, stream_events

pytestmark = pytest.mark.timeout(600)
QUESTION = "Why is the sky blue?"


@pytest.fixture(scope="module")
def live(tool_chat_bundle_factory) -> Iterator[Any]:
    server = serve_bundle_live(tool_chat_bundle_factory("deepseek-r1"), context=512)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _thinking(response: Any) -> str:
    [item] = [item for item in response.output if item.type == "reasoning"]
    return "".join(part.text for part in [*(item.content or []), *item.summary])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_reasoning_item_is_the_chats_reasoning_content(client: openai.OpenAI, seed: int) -> None:
    response = client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": "high"},
                                       max_output_tokens=24, extra_body={"seed": seed})
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                          reasoning_effort="high", max_tokens=24, seed=seed)
    message = chat.choices[0].message
    assert message.reasoning_content and _thinking(response) == message.reasoning_content
    assert response.output_text == (message.content or "")
    assert response.output[0].type == "reasoning" and response.output[0].content[0].type == "reasoning_text"
    assert 0 < response.usage.output_tokens_details.reasoning_tokens <= response.usage.output_tokens


def test_streamed_reasoning_as_content_and_as_summary(live, client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "input": QUESTION, "max_output_tokens": 24, "seed": 3}
    whole = client.responses.create(**{k: v for k, v in ask.items() if k != "seed"}, extra_body={"seed": 3},
                                    reasoning={"effort": "high"})
    as_content = stream_events(live.url, {**ask, "reasoning": {"effort": "high"}})
    final = check_events(as_content)
    assert _thinking(final) == _thinking(whole)
    assert "".join(e["delta"] for e in as_content if e["type"] == "response.reasoning_text.delta") == _thinking(whole)
    as_summary = stream_events(live.url, {**ask, "reasoning": {"effort": "high", "summary": "auto"},
                                          "include": ["reasoning.encrypted_content"]})
    final = check_events(as_summary)
    kinds = [e["type"] for e in as_summary]
    assert "response.reasoning_summary_part.added" in kinds and "response.reasoning_summary_part.done" in kinds
    deltas = "".join(e["delta"] for e in as_summary if e["type"] == "response.reasoning_summary_text.delta")
    [item] = [item for item in final.output if item.type == "reasoning"]
    assert deltas == item.summary[0].text == _thinking(whole) == item.encrypted_content


def test_a_reasoning_item_sent_back_reaches_the_template_as_the_chat_would_send_it(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=QUESTION, reasoning={"effort": "high"},
                                    max_output_tokens=12, extra_body={"seed": 5}, store=False)
    # The reasoning item alone: whether 12 tokens also reach an answer (a message item) depends on the sampled text.
    reasoning = [item.model_dump(exclude_unset=True) for item in first.output if item.type == "reasoning"]
    assert reasoning
    follow_up = [{"role": "user", "content": QUESTION}, *reasoning,
                 {"role": "assistant", "content": "Rayleigh scattering."}, {"role": "user", "content": "Thanks!"}]
    second = client.responses.create(model=MODEL, input=follow_up, max_output_tokens=4, store=False)
    chat = client.chat.completions.create(model=MODEL, max_tokens=1, messages=[
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": _thinking(first)},
        {"role": "user", "content": "Thanks!"}])
    assert second.usage.input_tokens == chat.usage.prompt_tokens
