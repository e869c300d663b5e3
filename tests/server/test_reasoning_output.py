"""Thinking separated from the answer on /v1/chat/completions, against a served GGUF bundle whose tokenizer
carries DeepSeek-R1-Distill-Qwen's real template (tests/fixtures/tool_chat_models.py), with the official
``openai`` client.

That template opens ``<think>`` in its generation prompt when thinking is on, so the random tiny model's
first words are thinking; a logit bias on the ``</think>`` token makes it close the block after a few
tokens, at a point each seed decides. The raw output (the generated tokens' bytes, from logprobs) is the
judge: the reply's ``reasoning_content`` must be what came before ``</think>``, its ``content`` what came
after, streamed and not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from edgeopt.server.chat.tools.json_scan import (
    WHITESPACE,  # what the server strips around a thought (JSON's four)
)
from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live

pytestmark = pytest.mark.timeout(600)
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]
SEEDS = range(12)


@pytest.fixture(scope="module")
def thinking(tool_chat_bundle_factory) -> Iterator[tuple[openai.OpenAI, dict[str, Any]]]:
    bundle = tool_chat_bundle_factory("deepseek-r1")
    added = json.loads((bundle / "tokenizer" / "tokenizer.json").read_text())["added_tokens"]
    close_id = next(t["id"] for t in added if t["content"] == "</think>")
    live = serve_bundle_live(bundle, context=512)
    try:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
        yield client, dict(model=MODEL, messages=QUESTION, max_tokens=24, reasoning_effort="high",
                           logit_bias={str(close_id): 3})
    finally:
        live.stop()


def _raw(reply: Any) -> str:
    return b"".join(bytes(t.bytes) for t in reply.choices[0].logprobs.content).decode("utf-8", "replace")


def test_thinking_and_answer_are_split_where_the_model_closed_the_block(thinking) -> None:
    client, ask = thinking
    both = 0
    for seed in SEEDS:
        reply = client.chat.completions.create(**ask, seed=seed, logprobs=True, top_logprobs=0)
        message = reply.choices[0].message
        raw = _raw(reply)
        thought, closed, answer = raw.partition("</think>")
        reasoning = getattr(message, "reasoning_content", None)
        assert reasoning == (thought.strip(WHITESPACE) or None), (seed, raw)
        assert getattr(message, "reasoning", None) == reasoning  # both names clients read
        assert message.content == (answer.lstrip(WHITESPACE) if closed else ""), (seed, raw)
        both += bool(reasoning and message.content)
    assert both >= len(SEEDS) // 2, "the bias should close the thinking early in most seeds"


def test_streamed_thinking_comes_first_and_matches_the_whole_reply(thinking) -> None:
    client, ask = thinking
    for seed in SEEDS[:3]:
        whole = client.chat.completions.create(**ask, seed=seed).choices[0].message
        kinds: list[str] = []
        reasoning, reasoning_alias, content = "", "", ""
        for chunk in client.chat.completions.create(**ask, seed=seed, stream=True):
            delta = chunk.choices[0].delta
            if getattr(delta, "reasoning_content", None):
                reasoning += delta.reasoning_content
                reasoning_alias += delta.reasoning
                kinds.append("reasoning")
            if delta.content:
                content += delta.content
                kinds.append("content")
        assert reasoning == (getattr(whole, "reasoning_content", None) or "") == reasoning_alias
        assert content == whole.content
        assert kinds == sorted(kinds, key=lambda kind: kind != "reasoning"), kinds  # no thinking after answer


def test_reasoning_effort_none_turns_thinking_off(thinking) -> None:
    """The template closes an empty thinking block in the prompt: every generated word is answer."""
    client, ask = thinking
    reply = client.chat.completions.create(**{**ask, "reasoning_effort": "none"}, seed=1, logprobs=True,
                                           top_logprobs=0)
    message = reply.choices[0].message
    assert getattr(message, "reasoning_content", None) is None and message.content == _raw(reply)


def test_constrained_output_is_the_answer_even_where_the_prompt_opened_thinking(thinking) -> None:
    client, ask = thinking
    reply = client.chat.completions.create(**ask, seed=2, response_format={"type": "json_object"})
    message = reply.choices[0].message
    assert getattr(message, "reasoning_content", None) is None and message.content.startswith("{")
