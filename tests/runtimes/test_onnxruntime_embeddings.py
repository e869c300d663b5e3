"""/v1/embeddings over an ONNX encoder bundle: OpenAI shape, errors, batching of concurrent requests."""

from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.server.app import create_app

from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.runtimes import load_embedding_runtime


@pytest.fixture()
def app_and_runtime(encoder_fp32_bundle):
    runtime = load_embedding_runtime("onnxruntime", encoder_fp32_bundle, load_bundle(encoder_fp32_bundle), threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    app = create_app(ServerSettings(model_names=("bert",), kind="embedding"), served=served)
    return app, runtime, served


async def post(app, body):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/v1/embeddings", json=body)


async def test_embeddings_response_is_openai_shaped(app_and_runtime):
    app, runtime, _ = app_and_runtime
    resp = await post(app, {"model": "bert", "input": ["hello world", "import json"]})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    got = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, runtime.embed(["hello world", "import json"]), atol=1e-5)
    ids = runtime.tokenize(["hello world", "import json"])
    assert body["usage"] == {"prompt_tokens": sum(map(len, ids)), "total_tokens": sum(map(len, ids))}


async def test_base64_and_token_inputs(app_and_runtime):
    app, runtime, _ = app_and_runtime
    ids = runtime.tokenize(["open the file"])[0]
    resp = await post(app, {"model": "bert", "input": ids, "encoding_format": "base64"})
    assert resp.status_code == 200, resp.text
    vec = np.frombuffer(base64.b64decode(resp.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, runtime.embed(["open the file"])[0], atol=1e-5)


@pytest.mark.parametrize("body,status,needle", [
    ({"model": "bert", "input": ""}, 400, "empty string"),
    ({"model": "bert", "input": []}, 400, "input is empty"),
    ({"model": "bert", "input": [[1, 99999]]}, 400, "99999"),
    ({"model": "bert", "input": "x", "dimensions": 8}, 400, "dimensions=8"),
    ({"model": "gpt-4", "input": "x"}, 404, "gpt-4"),
    # sentence-transformers' max_seq_length (96), not the 128 positions nor the tokenizer.json's 64
    ({"model": "bert", "input": "word " * 400}, 400, "more than the model's 96 (max_seq_length"),
])
async def test_bad_requests_get_clear_errors(app_and_runtime, body, status, needle):
    app, _, _ = app_and_runtime
    resp = await post(app, body)
    assert resp.status_code == status, resp.text
    assert needle in resp.json()["error"]["message"]


async def test_concurrent_requests_share_forward_passes(app_and_runtime):
    app, runtime, served = app_and_runtime
    texts = [f"request number {i} about the json module" for i in range(12)]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        responses = await asyncio.gather(*[client.post("/v1/embeddings", json={"model": "bert", "input": t})
                                           for t in texts])
    assert all(r.status_code == 200 for r in responses)
    got = np.array([r.json()["data"][0]["embedding"] for r in responses], dtype=np.float32)
    np.testing.assert_allclose(got, runtime.embed(texts), atol=1e-5)
    assert served.embedding_batcher.batches_run < len(texts)  # requests were batched together
