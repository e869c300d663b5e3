"""POST /v1/rerank (and /rerank, /v2/rerank) of a rerank bundle (tests/fixtures/cross_encoder.py: the real MiniLM
encoder and tokenizer, a random head): the shape llama-server, Jina and Cohere share, scores equal to
sentence-transformers' CrossEncoder.predict, concurrent requests batched, bad input refused by name, and
Cohere's official client (v1 and v2) against the local URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.runtimes import load_rerank_runtime
from edgeopt.server.app import create_app
from edgeopt.server.rerank.schema import MAX_DOCUMENTS
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.server.startup.serve_process import launched_server

MODEL = "minilm-rerank"
QUERY = "Is the museum open on Mondays?"
DOCUMENTS = ["Tickets cost twelve euros for adults.", "The museum is closed on Mondays and public holidays.",
             "Monday is the first day of the working week.", "The museum shows modern art and sculpture."]


@pytest.fixture(scope="module")
def rerank_app(rerank_fp32_bundle: Path):
    manifest = load_bundle(rerank_fp32_bundle)
    runtime = load_rerank_runtime(manifest.runtime, rerank_fp32_bundle, manifest, threads=2)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, reranker=runtime)
    return create_app(ServerSettings(model_names=(MODEL,), kind="rerank"), served=served)


def _post_all(app, bodies: list[dict], path: str = "/v1/rerank") -> list[httpx.Response]:
    async def post() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await asyncio.gather(*[client.post(path, json=body) for body in bodies])

    return asyncio.run(post())


def _post(app, body: dict, path: str = "/v1/rerank") -> httpx.Response:
    return _post_all(app, [body], path)[0]


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_results_are_best_first_with_cross_encoder_scores(rerank_app, minilm_cross_encoder_dir: Path, path: str):
    from sentence_transformers import CrossEncoder

    expected = CrossEncoder(str(minilm_cross_encoder_dir), device="cpu", local_files_only=True).predict(
        [(QUERY, d) for d in DOCUMENTS])
    resp = _post(rerank_app, {"model": MODEL, "query": QUERY, "documents": DOCUMENTS}, path)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == MODEL and body["object"] == "list" and body["id"].startswith("rerank-")
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4 * 4
    results = body["results"]
    assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable"))
    assert all(set(r) == {"index", "relevance_score"} for r in results)  # no document unless asked
    np.testing.assert_allclose([r["relevance_score"] for r in results], np.sort(expected)[::-1], rtol=0, atol=1e-4)


def test_top_n_and_return_documents(rerank_app):
    body = {"model": MODEL, "query": QUERY, "documents": [DOCUMENTS[0], {"text": DOCUMENTS[1]}, *DOCUMENTS[2:]],
            "top_n": 2, "return_documents": True}
    results = _post(rerank_app, body).json()["results"]
    everything = _post(rerank_app, {"model": MODEL, "query": QUERY, "documents": DOCUMENTS}).json()["results"]
    assert [r["index"] for r in results] == [r["index"] for r in everything[:2]]
    assert [r["document"] for r in results] == [{"text": DOCUMENTS[r["index"]]} for r in results]
    # more than there are documents: all of them, as Cohere and llama-server answer
    assert len(_post(rerank_app, {**body, "top_n": 50}).json()["results"]) == len(DOCUMENTS)


def test_concurrent_requests_share_forward_passes_and_get_their_own_scores(rerank_app):
    served = rerank_app.state.server.served
    alone = [_post(rerank_app, {"model": MODEL, "query": QUERY, "documents": [d]}).json() for d in DOCUMENTS]
    before = served.rerank_batcher.batches_run
    together = _post_all(rerank_app, [{"model": MODEL, "query": QUERY, "documents": [d]} for d in DOCUMENTS])
    assert served.rerank_batcher.batches_run - before < len(DOCUMENTS)
    for one, many in zip(alone, together):
        assert many.json()["results"][0]["relevance_score"] == pytest.approx(one["results"][0]["relevance_score"],
                                                                             abs=1e-5)


@pytest.mark.parametrize("body, status, field", [
    ({"model": MODEL, "query": QUERY, "documents": []}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": 0}, 400, "top_n"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": -3}, 400, "top_n"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": MAX_DOCUMENTS + 1}, 400, "top_n"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": "2"}, 400, "top_n"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": True}, 400, "top_n"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "return_documents": "yes"}, 400, "return_documents"),
    ({"model": MODEL, "query": "", "documents": DOCUMENTS}, 400, "query"),
    ({"model": MODEL, "query": ["a list"], "documents": DOCUMENTS}, 400, "query"),
    ({"model": MODEL, "documents": DOCUMENTS}, 400, "query"),
    ({"model": MODEL, "query": QUERY}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": "one string"}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": [1, 2]}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": [{"title": "no text"}]}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": ["x"] * (MAX_DOCUMENTS + 1)}, 400, "documents"),
    ({"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "max_tokens_per_doc": 64}, 400, "max_tokens_per_doc"),
    ({"query": QUERY, "documents": DOCUMENTS}, 400, "model"),
    ({"model": "other", "query": QUERY, "documents": DOCUMENTS}, 404, "model"),
])
def test_bad_input_is_refused_naming_the_field(rerank_app, body: dict, status: int, field: str):
    resp = _post(rerank_app, body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert field in (error.get("param") or "") + error["message"], error


def test_rerank_is_not_served_for_other_bundle_kinds(encoder_fp32_bundle: Path):
    from edgeopt.runtimes import load_embedding_runtime

    manifest = load_bundle(encoder_fp32_bundle)
    runtime = load_embedding_runtime(manifest.runtime, encoder_fp32_bundle, manifest, threads=1)
    served = ServedModel(context_length=runtime.info.context_length, tokenizer=runtime.tokenizer, embedder=runtime)
    app = create_app(ServerSettings(model_names=("bert",), kind="embedding"), served=served)
    assert _post(app, {"model": "bert", "query": QUERY, "documents": DOCUMENTS}).status_code == 404


def test_cohere_client_reranks_against_edgeopt_serve(rerank_fp32_bundle: Path):
    """`edgeopt serve BUNDLE` in its own process (the launcher's rerank path), driven by Cohere's official client."""
    import cohere  # the official client (pyproject's dev extra); it talks to the local URL only

    name = rerank_fp32_bundle.name  # the bundle's directory name is the model id
    with launched_server(rerank_fp32_bundle, threads=2) as server:
        expected = httpx.post(f"{server.base_url}/v1/rerank", timeout=60,
                              json={"model": name, "query": QUERY, "documents": DOCUMENTS}).json()["results"]
        v1 = cohere.Client(api_key="unused", base_url=server.base_url, timeout=60)
        reply = v1.rerank(model=name, query=QUERY, documents=DOCUMENTS, top_n=3, return_documents=True)
        assert [r.index for r in reply.results] == [r["index"] for r in expected[:3]]
        assert [r.relevance_score for r in reply.results] == pytest.approx([r["relevance_score"] for r in expected[:3]])
        assert [r.document.text for r in reply.results] == [DOCUMENTS[r["index"]] for r in expected[:3]]
        v2 = cohere.ClientV2(api_key="unused", base_url=server.base_url, timeout=60)
        reply = v2.rerank(model=name, query=QUERY, documents=DOCUMENTS, top_n=2)
        assert [r.index for r in reply.results] == [r["index"] for r in expected[:2]]
        with pytest.raises(cohere.core.ApiError) as exc:  # an error reaches the client as one, with its status
            v2.rerank(model="missing", query=QUERY, documents=DOCUMENTS)
        assert exc.value.status_code == 404
        assert httpx.post(f"{server.base_url}/v1/embeddings", json={"model": name, "input": "x"}).status_code == 404
