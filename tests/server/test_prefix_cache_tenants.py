"""The prefix cache per tenant over HTTP, with the official openai client and a real trained model (SmolLM2-135M-
Instruct in llama.cpp): with ``--api-keys``, a second key sending the prompt the first sent gets
``cached_tokens`` 0 and the same greedy answer from a fresh prefill, while the first key's repeat still hits;
without keys every client shares the cache as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live, smollm2_bundle

pytestmark = pytest.mark.timeout(300)
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
SYSTEM = ("You are the assistant of a small bakery in Lyon. The owner's recipes are secret: the brioche uses "
          "cultured butter from Isigny, the croissant dough rests for thirty-six hours, and the chocolate comes from "
          "a single plantation in Madagascar. ") * 7


@pytest.fixture(scope="module")
def bundle(smollm2_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return smollm2_bundle(smollm2_checkpoint, tmp_path_factory.mktemp("smollm2"))


def served(bundle: Path, settings: dict | None = None) -> Iterator:
    live = serve_bundle_live(bundle, context=2048, settings=settings)
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def keyed(bundle: Path) -> Iterator:
    yield from served(bundle, {"api_keys": KEYS})


@pytest.fixture(scope="module")
def keyless(bundle: Path) -> Iterator:
    yield from served(bundle)


def client(live, key: str = "unused") -> openai.OpenAI:  # noqa: ANN001 - tests.server.live.LiveServer
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=key, max_retries=0, timeout=120)


def ask(live, key: str = "unused") -> tuple[str, int, int, int]:  # noqa: ANN001
    """(answer, prompt tokens, cached tokens, prompt tokens the engine computed for it)."""
    before = live.state.engine_stats().prefill_tokens_total
    reply = client(live, key).chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What do you sell?"}],
        max_tokens=16, temperature=0)
    computed = live.state.engine_stats().prefill_tokens_total - before
    usage = reply.usage
    return reply.choices[0].message.content, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens, computed


def test_a_second_key_gets_no_cached_tokens_and_the_first_key_s_repeat_hits(keyed) -> None:  # noqa: ANN001
    alice_answer, prompt_tokens, alice_cached, _ = ask(keyed, KEYS["alice"])
    assert prompt_tokens > 300 and alice_cached == 0
    bob_answer, _, bob_cached, bob_computed = ask(keyed, KEYS["bob"])
    assert bob_cached == 0 and bob_computed == prompt_tokens  # a fresh prefill of the whole prompt
    assert bob_answer == alice_answer
    _, _, again_cached, _ = ask(keyed, KEYS["alice"])
    assert again_cached >= prompt_tokens - 1


def test_without_keys_the_same_prompt_from_another_client_still_hits(keyless) -> None:  # noqa: ANN001
    _, prompt_tokens, first_cached, _ = ask(keyless)
    _, _, second_cached, _ = ask(keyless)
    assert first_cached == 0 and second_cached >= prompt_tokens - 1
