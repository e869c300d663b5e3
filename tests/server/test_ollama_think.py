"""Ollama's ``think`` with the official client on a served GGUF bundle carrying DeepSeek-R1-Distill-Qwen's
real template (tests/fixtures/tool_chat_models.py): thinking comes back in ``message.thinking`` (split by the
chat path's reasoning parser), ``think=false`` makes every generated word answer. The raw output (the
generated tokens, from logprobs) is the judge."""

from __future__ import annotations

from collections.abc import Iterator

import ollama
import pytest

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live

pytestmark = pytest.mark.timeout(600)
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.fixture(scope="module")
def client(tool_chat_bundle_factory) -> Iterator[ollama.Client]:
    live = serve_bundle_live(tool_chat_bundle_factory("deepseek-r1"), context=512)
    try:
        yield ollama.Client(host=live.url, timeout=120)
    finally:
        live.stop()


def _raw(reply) -> str:  # noqa: ANN001 - the client's ChatResponse
    return "".join(entry.token for entry in reply.logprobs)


def test_think_true_returns_the_thinking_apart_and_false_turns_it_off(client: ollama.Client) -> None:
    options = {"temperature": 0, "num_predict": 24}
    thought = client.chat(model=MODEL, messages=QUESTION, think=True, options=options, logprobs=True)
    raw = _raw(thought)
    before, closed, after = raw.partition("</think>")
    assert thought.message.thinking and thought.message.thinking == before.strip(), raw
    assert thought.message.content == (after.lstrip() if closed else ""), raw
    streamed = list(client.chat(model=MODEL, messages=QUESTION, think=True, options=options, stream=True))
    assert "".join(p.message.thinking or "" for p in streamed) == (thought.message.thinking or "")
    plain = client.chat(model=MODEL, messages=QUESTION, think=False, options=options, logprobs=True)
    assert not plain.message.thinking and plain.message.content == _raw(plain)
