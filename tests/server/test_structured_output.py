"""response_format on real bundles: every json_schema output validates, json_object outputs parse.

The models are tiny and random (tests/fixtures): only the constraint makes their output valid JSON, so
these tests fail on a server that ignores or weakens response_format. Each runtime answers the same 50
seeded random schemas (tests/fixtures/json_schemas.py); ``jsonschema`` is the judge. Sampling is seeded
(temperature 1): a random model's greedy argmax repeats one token forever, and an unbounded number
("number" has no digit limit in JSON schema) would then run to max_tokens; with sampling every output
must end "stop" well within the budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai
import pytest

from tests.fixtures.json_schemas import random_schemas
from tests.fixtures.onnx_bundles import optimize_onnx
from tests.server.conftest import MODEL
from tests.server.gguf_bundle import make_gguf_bundle, serve_bundle_live

pytestmark = pytest.mark.timeout(600)
SCHEMAS = random_schemas(50, seed=13)
MAX_TOKENS = 200


@pytest.fixture(scope="module", params=["gguf", "onnx"])
def bundle(request, tiny_gguf_factory, tiny_model_factory, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("structured")
    if request.param == "gguf":
        return make_gguf_bundle(tiny_gguf_factory("qwen2", "Q8_0"), tiny_model_factory("qwen2"), out / "gguf")
    return optimize_onnx(tiny_model_factory("qwen2"), out / "onnx", "fp32")


@pytest.fixture(scope="module")
def client(bundle: Path) -> Iterator[openai.OpenAI]:
    live = serve_bundle_live(bundle, context=256)
    try:
        yield openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        live.stop()


def closing_token_bias(bundle: Path) -> dict[str, float]:
    """+8 on tokens holding a closing quote or brace: free JSON (json_object) has unbounded strings, which a
    random model would close only by chance (~1 in the vocabulary per token). The grammar still decides
    which of them are legal; the bias only shortens the output."""
    vocab = json.loads((bundle / "tokenizer" / "tokenizer.json").read_text())["model"]["vocab"]
    return {str(i): 8.0 for piece, i in vocab.items() if '"' in piece or "}" in piece}


def _ask(client: openai.OpenAI, index: int) -> tuple[str, str | None]:
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Fill in record {index}."}], max_tokens=MAX_TOKENS,
        temperature=1.0, seed=index,
        response_format={"type": "json_schema", "json_schema": {"name": f"r{index}", "schema": SCHEMAS[index],
                                                                "strict": True}})
    return reply.choices[0].message.content or "", reply.choices[0].finish_reason


def test_every_json_schema_output_validates(client: openai.OpenAI) -> None:
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda i: _ask(client, i), range(len(SCHEMAS))))
    unfinished = [(i, text) for i, (text, reason) in enumerate(replies) if reason != "stop"]
    assert not unfinished, f"{len(unfinished)} outputs did not finish within {MAX_TOKENS} tokens: {unfinished[:3]}"
    for i, (text, _) in enumerate(replies):
        jsonschema.validate(json.loads(text), SCHEMAS[i])


def test_json_object_outputs_parse_streaming_and_not(client: openai.OpenAI, bundle: Path) -> None:
    messages = [{"role": "user", "content": "Reply in JSON."}]
    ask = dict(model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=1.0,
               response_format={"type": "json_object"}, logit_bias=closing_token_bias(bundle))
    for seed in range(5):
        reply = client.chat.completions.create(seed=seed, **ask)
        assert reply.choices[0].finish_reason == "stop", reply.choices[0].message.content
        assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
        chunks = client.chat.completions.create(seed=seed, stream=True, **ask)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reply.choices[0].message.content  # same seed, same constrained draw


def test_unsupported_schema_feature_is_a_400_naming_it(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "dependentRequired": {"a": ["b"]}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=8,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema}})
    assert "dependentRequired" in str(caught.value)
    assert caught.value.body["param"] == "response_format.json_schema.schema"
    # The server keeps serving.
    assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                          max_tokens=2).choices[0].finish_reason in ("stop", "length")
