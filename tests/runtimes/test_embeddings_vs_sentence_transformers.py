"""/v1/embeddings of fp32 ONNX bundles against the reference we did not write: sentence-transformers.

The checkpoints are tiny random encoders of four families whose tokenizer.json pads to a fixed 64 tokens
and truncates (as all-MiniLM-L6-v2's pads and truncates at 128), with sentence-transformers'
max_seq_length (96) between that and the position table (128), as in the real model (128 < 256 < 512).
Served vectors must equal `SentenceTransformer(dir).encode` whether texts come one per request or
batched, and whether they are shorter or longer than the tokenizer.json's padding length.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from edgeopt.store.bundle import load_bundle
from edgeopt.server.app import create_app
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.runtimes import load_embedding_runtime
from tests.fixtures.onnx_bundles import encoder_bundle
from tests.fixtures.tiny_encoder import ST_MAX_SEQ_LENGTH, build_tiny_encoder

COSINE = 0.9999
WORDS = "the function returns a list of the keys of the mapping and opens the file in binary mode".split()


def texts_for(model: SentenceTransformer) -> list[str]:
    """Short texts (padded to 64 by the file, were it obeyed) and one of 64..96 tokens (cut at 64)."""
    short = ["hello world", "json", "Open the file in binary mode before reading the image."]
    long_text = " ".join(WORDS * 8)
    while len(model.tokenizer(long_text)["input_ids"]) > ST_MAX_SEQ_LENGTH - 4:
        long_text = long_text.rsplit(" ", 1)[0]
    assert len(model.tokenizer(long_text)["input_ids"]) > 64  # longer than the file's fixed padding
    return short + [long_text]


def served_app(bundle: Path) -> tuple[object, object]:
    runtime = load_embedding_runtime("onnxruntime", bundle, load_bundle(bundle), threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    return create_app(ServerSettings(model_names=("enc",), kind="embedding"), served=served), runtime


def post_all(app: object, *rounds: list[dict]) -> list[list[httpx.Response]]:
    """Each round's bodies posted concurrently, rounds one after another, all in one event loop (the
    server's batcher lives in the loop that first used it, as under uvicorn)."""
    async def run() -> list[list[httpx.Response]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return [list(await asyncio.gather(*[client.post("/v1/embeddings", json=b) for b in bodies]))
                    for bodies in rounds]

    return asyncio.run(run())


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("family,pooling,normalize", [
    ("bert", "mean", True), ("roberta", "mean", True), ("xlm-roberta", "mean", True), ("mpnet", "mean", True),
    ("bert", "cls", False), ("xlm-roberta", "cls", True),
])
def test_served_embeddings_equal_sentence_transformers(family: str, pooling: str, normalize: bool,
                                                       tmp_path: Path) -> None:
    model_dir = build_tiny_encoder(tmp_path / family, model_type=family, pooling=pooling, normalize=normalize)
    reference_model = SentenceTransformer(str(model_dir), device="cpu")
    texts = texts_for(reference_model)
    reference = reference_model.encode(texts, convert_to_numpy=True)
    app, runtime = served_app(encoder_bundle(model_dir, tmp_path / "bundle", "fp32"))

    one_by_one, (batched,) = post_all(app, [{"model": "enc", "input": t} for t in texts],
                                      [{"model": "enc", "input": texts}])
    assert all(r.status_code == 200 for r in one_by_one + [batched]), [r.text for r in one_by_one + [batched]]
    single = np.array([r.json()["data"][0]["embedding"] for r in one_by_one], dtype=np.float32)
    together = np.array([d["embedding"] for d in batched.json()["data"]], dtype=np.float32)
    for got in (single, together):
        assert cosines(got, reference).min() >= COSINE, cosines(got, reference)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(reference, axis=1), rtol=1e-3)
    # Usage counts the tokens the model saw: no padding, nothing cut.
    expected_tokens = sum(len(ids) for ids in reference_model.tokenizer(texts)["input_ids"])
    assert batched.json()["usage"]["prompt_tokens"] == expected_tokens


def test_over_long_input_is_a_400_and_truncation_matches_sentence_transformers(tmp_path: Path) -> None:
    """Decision: /v1/embeddings refuses an input over max_seq_length (OpenAI's behaviour, and no
    vector of a silently shortened text); ``runtime.embed(..., truncate=True)``, used by `edgeopt eval`,
    cuts exactly where sentence-transformers cuts."""
    model_dir = build_tiny_encoder(tmp_path / "roberta", model_type="roberta")
    reference_model = SentenceTransformer(str(model_dir), device="cpu")
    too_long = " ".join(WORDS * 10)
    assert len(reference_model.tokenizer(too_long)["input_ids"]) > ST_MAX_SEQ_LENGTH
    app, runtime = served_app(encoder_bundle(model_dir, tmp_path / "bundle", "fp32"))
    assert runtime.info.context_length == ST_MAX_SEQ_LENGTH  # not the 128 positions, not the file's 64

    ((resp,),) = post_all(app, [{"model": "enc", "input": ["short text", too_long]}])
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert f"more than the model's {ST_MAX_SEQ_LENGTH} (max_seq_length" in message and "input 1" in message

    truncated = runtime.tokenize([too_long], truncate=True)[0]
    st_ids = reference_model.tokenizer([too_long], truncation=True, max_length=reference_model.max_seq_length)
    assert truncated == st_ids["input_ids"][0]
    got = runtime.embed([too_long], truncate=True)
    assert cosines(got, reference_model.encode([too_long])).min() >= COSINE
