"""/api/embed and /api/embeddings with the official ``ollama`` client on a served embedding bundle: the
vectors are the model's own (the runtime's embeddings, L2-normalised as Ollama returns them), and the
generating routes are refused by name."""

from __future__ import annotations

import numpy as np
import ollama
import pytest
from edgeopt.runtimes import load_embedding_runtime

from edgeopt.store.bundle import load_bundle
from edgeopt.server.app import create_app
from edgeopt.server.state import ServedModel, ServerSettings
from tests.server.live import start_live_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def served_encoder(encoder_fp32_bundle):
    runtime = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    live = start_live_server(create_app(ServerSettings(model_names=("bert",), kind="embedding"), served=served))
    live.runtime = runtime
    yield live
    live.stop()


def test_embed_and_embeddings_return_the_models_normalised_vectors(served_encoder):
    client = ollama.Client(host=served_encoder.url, timeout=60)
    texts = ["the cat sat on the mat", "a completely different sentence"]
    reply = client.embed(model="bert:latest", input=texts)
    runtime = served_encoder.runtime
    expected = runtime.embed_ids(runtime.tokenize(texts))
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(reply.embeddings), expected, atol=1e-5)
    assert reply.prompt_eval_count == sum(len(ids) for ids in runtime.tokenize(texts))
    single = client.embeddings(model="bert", prompt=texts[0])
    np.testing.assert_allclose(single.embedding, expected[0], atol=1e-5)
    [listed] = client.list().models
    assert listed.model == "bert" and "embedding" in client.show("bert").capabilities


def test_too_long_input_is_truncated_unless_asked_not_to_and_chat_is_refused(served_encoder):
    client = ollama.Client(host=served_encoder.url, timeout=60)
    long_text = "word " * 5000
    assert len(client.embed(model="bert", input=long_text).embeddings[0]) == served_encoder.runtime.dimensions
    with pytest.raises(ollama.ResponseError, match="tokens") as refused:
        client.embed(model="bert", input=long_text, truncate=False)
    assert refused.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match="embedding"):
        client.chat(model="bert", messages=[{"role": "user", "content": "hi"}])
