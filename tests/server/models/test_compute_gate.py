"""The compute gate: a model's compute call holds the process-wide lock, every other member of its protocol is
the model's own (stated one by one, no attribute forwarding), and an engine runs on a gated runtime as on the
runtime itself."""

from __future__ import annotations

import threading

import numpy as np

from edgeopt.engine import SamplingParams
from edgeopt.runtimes.base import EmbeddingRuntime, EncodedPair, RerankRuntime, RuntimeInfo, StepInput
from edgeopt.server.models.compute_gate import ComputeGate, GatedEmbedder, GatedReranker, GatedRuntime
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import ByteTokenizer, FakeRuntime

INFO = RuntimeInfo(vocab_size=256, kv_capacity_tokens=0, max_slots=0, context_length=8)


class LockCheckingRuntime(FakeRuntime):
    """Records whether the gate's lock was held during each step."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__()
        self.lock = lock
        self.held: list[bool] = []

    def step(self, batch: list[StepInput]) -> np.ndarray:
        self.held.append(self.lock.locked())
        return super().step(batch)


class Embedder(EmbeddingRuntime):
    info, tokenizer, dimensions = INFO, ByteTokenizer(), 3

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        return [list(text.encode()) for text in texts]

    def embed_ids(self, batch: list[list[int]]) -> np.ndarray:
        assert self.lock.locked()
        return np.zeros((len(batch), self.dimensions), dtype=np.float32)

    def close(self) -> None: ...


class Reranker(RerankRuntime):
    info, tokenizer = INFO, ByteTokenizer()

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def encode_pairs(self, query: str, documents: list[str]) -> list[EncodedPair]:
        return [EncodedPair([1, 2], [0, 1]) for _ in documents]

    def score_pairs(self, batch: list[EncodedPair]) -> np.ndarray:
        assert self.lock.locked()
        return np.ones(len(batch), dtype=np.float32)

    def close(self) -> None: ...


def test_each_kind_is_wrapped_by_its_own_class_and_computes_under_the_lock() -> None:
    gate = ComputeGate()
    embedder, reranker = gate.embedder(Embedder(gate.lock)), gate.reranker(Reranker(gate.lock))
    assert isinstance(embedder, GatedEmbedder) and isinstance(reranker, GatedReranker)
    assert embedder.embed_ids([[1], [2]]).shape == (2, 3) and embedder.dimensions == 3
    assert embedder.tokenize(["ab"]) == [[97, 98]] and embedder.info is INFO
    assert reranker.score_pairs(reranker.encode_pairs("q", ["a", "b"])).tolist() == [1.0, 1.0]
    assert not gate.lock.locked()


def test_an_engine_over_a_gated_runtime_steps_under_the_lock_and_answers_as_over_the_runtime() -> None:
    gate = ComputeGate()
    runtime = LockCheckingRuntime(gate.lock)
    gated = gate.runtime(runtime)
    assert isinstance(gated, GatedRuntime)
    assert gated.info is runtime.info and gated.tokenizer is runtime.tokenizer
    assert gated.max_batch_tokens == runtime.max_batch_tokens and gated.kv_type == runtime.kv_type
    runtime.pass_cost_key = ("model.gguf", 2)  # a model swapped back in reuses its decode-pass cost through the gate
    assert gated.pass_cost_key == ("model.gguf", 2)
    engine, _ = make_engine(gated)
    texts = []

    async def body(e):  # type: ignore[no-untyped-def]
        out = await e.add_request("a", [65, 66, 67], SamplingParams(max_tokens=4, temperature=0.0)).collect()
        texts.append(out.text)

    run_engine(engine, body)
    plain, _ = make_engine(FakeRuntime())
    run_engine(plain, body)
    assert texts[0] == texts[1] and runtime.held and all(runtime.held)
