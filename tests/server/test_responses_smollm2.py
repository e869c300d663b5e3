"""/v1/responses with a real trained model (SmolLM2-135M-Instruct, edgeopt/demo/smollm2.py): three turns
chained by ``previous_response_id`` send only their new input, and the server renders the stored
conversation so that the third prompt comes at least 90% from the prefix cache: everything but the new turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.conftest import MODEL
from tests.server.gguf_bundle import serve_bundle_live, smollm2_bundle

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def client(smollm2_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    live = serve_bundle_live(smollm2_bundle(smollm2_checkpoint, tmp_path_factory.mktemp("smollm2")), context=2048)
    try:
        yield openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        live.stop()


def test_three_chained_turns_take_the_third_prompt_from_the_prefix_cache(client: openai.OpenAI) -> None:
    instructions = ("You are a helpful assistant for travellers planning a trip to Europe. Answer briefly and "
                    "politely, in plain English, with concrete suggestions: places, transport, times and prices. "
                    "If you do not know something, say so rather than guessing.")
    previous = None
    turns = []
    for question in ("Where is Paris?", "And what should I see there?", "How do I get there by train?"):
        response = client.responses.create(model=MODEL, instructions=instructions, input=question,
                                           previous_response_id=previous, max_output_tokens=64, temperature=0)
        assert "Paris" in response.output_text, response.output_text
        turns.append(response.usage)
        previous = response.id
    second, third = turns[1], turns[2]
    # The previous prompt and the whole previous answer were reused; only the new turn was computed.
    assert third.input_tokens_details.cached_tokens >= second.input_tokens + second.output_tokens - 1, turns
    assert third.input_tokens_details.cached_tokens >= 0.9 * third.input_tokens, turns
