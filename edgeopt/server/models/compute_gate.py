"""One model computes at a time: a process-wide lock around each engine step and each encoder batch.

Loaded models decode concurrently, interleaved step by step, each step on every thread the device gives
(llama.cpp's own thread count). Giving each of N models 1/N of the cores instead would slow a lone busy
model N times while the others idle, and letting each take every core oversubscribes them: llama.cpp's
threads spin at a barrier after every operation, so two models' steps at once on the same cores run far
slower than the two one after the other (runtimes/llama_cpp/threads.py measured 60x on 2 cores). A step
is milliseconds (a prefill chunk is at most the runtime's batch), so a model waits at most one of
another's steps.

Each kind of model is wrapped by a class of its own that states its protocol's every member
(runtimes/base.py): the compute call takes the lock, the others are the model's own.
"""

from __future__ import annotations

from collections.abc import Hashable

import threading
from pathlib import Path

import numpy as np

from edgeopt.runtimes.base import (EmbeddingRuntime, EncodedPair, RerankRuntime, Runtime, RuntimeInfo, StepInput,
                                   Tokenizer)


class ComputeGate:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def runtime(self, runtime: Runtime) -> Runtime:
        """``runtime`` whose ``step`` takes the lock."""
        return GatedRuntime(runtime, self.lock)

    def embedder(self, embedder: EmbeddingRuntime) -> EmbeddingRuntime:
        """``embedder`` whose ``embed_ids`` takes the lock."""
        return GatedEmbedder(embedder, self.lock)

    def reranker(self, reranker: RerankRuntime) -> RerankRuntime:
        """``reranker`` whose ``score_pairs`` takes the lock."""
        return GatedReranker(reranker, self.lock)


class GatedRuntime(Runtime):
    def __init__(self, runtime: Runtime, lock: threading.Lock) -> None:
        self._runtime = runtime
        self._lock = lock

    def step(self, batch: list[StepInput]) -> np.ndarray:
        with self._lock:
            return self._runtime.step(batch)

    @property
    def info(self) -> RuntimeInfo:  # type: ignore[override]
        return self._runtime.info

    @property
    def tokenizer(self) -> Tokenizer:  # type: ignore[override]
        return self._runtime.tokenizer

    @property
    def max_batch_tokens(self) -> int | None:  # type: ignore[override]
        return self._runtime.max_batch_tokens

    @property
    def max_logit_rows(self) -> int | None:  # type: ignore[override]
        return self._runtime.max_logit_rows

    @property
    def pass_cost_key(self) -> Hashable | None:  # type: ignore[override]
        return self._runtime.pass_cost_key

    @property
    def kv_type(self) -> str | None:  # type: ignore[override]
        return self._runtime.kv_type

    @property
    def kv_v_transposed(self) -> bool | None:  # type: ignore[override]
        return self._runtime.kv_v_transposed

    def release(self, slot: int) -> None:
        self._runtime.release(slot)

    def share_kv(self, source: int, target: int, start: int, end: int) -> None:
        self._runtime.share_kv(source, target, start, end)

    def move_kv(self, source: int, target: int) -> None:
        self._runtime.move_kv(source, target)

    def trim(self, slot: int, tokens: int) -> None:
        self._runtime.trim(slot, tokens)

    def save_sequence(self, seq_id: int, path: Path, tokens: list[int]) -> int:
        return self._runtime.save_sequence(seq_id, path, tokens)

    def load_sequence(self, seq_id: int, path: Path, max_tokens: int) -> list[int]:
        return self._runtime.load_sequence(seq_id, path, max_tokens)

    def close(self) -> None:
        self._runtime.close()


class GatedEmbedder(EmbeddingRuntime):
    def __init__(self, embedder: EmbeddingRuntime, lock: threading.Lock) -> None:
        self._embedder = embedder
        self._lock = lock

    def embed_ids(self, batch: list[list[int]]) -> np.ndarray:
        with self._lock:
            return self._embedder.embed_ids(batch)

    @property
    def info(self) -> RuntimeInfo:  # type: ignore[override]
        return self._embedder.info

    @property
    def tokenizer(self) -> Tokenizer:  # type: ignore[override]
        return self._embedder.tokenizer

    @property
    def dimensions(self) -> int:  # type: ignore[override]
        return self._embedder.dimensions

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        return self._embedder.tokenize(texts, truncate)

    def close(self) -> None:
        self._embedder.close()


class GatedReranker(RerankRuntime):
    def __init__(self, reranker: RerankRuntime, lock: threading.Lock) -> None:
        self._reranker = reranker
        self._lock = lock

    def score_pairs(self, batch: list[EncodedPair]) -> np.ndarray:
        with self._lock:
            return self._reranker.score_pairs(batch)

    @property
    def info(self) -> RuntimeInfo:  # type: ignore[override]
        return self._reranker.info

    @property
    def tokenizer(self) -> Tokenizer:  # type: ignore[override]
        return self._reranker.tokenizer

    def encode_pairs(self, query: str, documents: list[str]) -> list[EncodedPair]:
        return self._reranker.encode_pairs(query, documents)

    def close(self) -> None:
        self._reranker.close()
