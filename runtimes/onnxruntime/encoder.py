"""Sentence embeddings from an exported encoder: tokenize, pad a batch, run, pool, normalize."""

from __future__ import annotations

import numpy as np

from edgeopt.errors import BackendError, ContextOverflowError
from runtimes.base import RuntimeInfo
from runtimes.onnxruntime.pooling import PoolingConfig, pool
from runtimes.onnxruntime.tokenizer import BundleTokenizer


def pad_batch(batch: list[list[int]], pad_token_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded int64 token ids and the matching attention mask (1 on real tokens)."""
    longest = max(len(ids) for ids in batch)
    ids = np.full((len(batch), longest), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(batch), longest), dtype=np.int64)
    for row, seq in enumerate(batch):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return ids, mask


class OnnxEmbeddingRuntime:
    """Serves embedding bundles; it has no KV cache and no engine (``step`` is not supported)."""

    def __init__(self, session, tokenizer: BundleTokenizer, pooling: PoolingConfig, info: RuntimeInfo,
                 pad_token_id: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.info = info
        self.pad_token_id = pad_token_id
        self._input_names = {i.name for i in session.get_inputs()}
        self.dimensions = int(session.get_outputs()[0].shape[-1])

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        batch = self.tokenizer.encode_batch(texts, add_special=True)
        for i, ids in enumerate(batch):
            if len(ids) > self.info.context_length:
                raise ContextOverflowError(
                    f"input {i} has {len(ids)} tokens, more than the model's {self.info.context_length}",
                    "shorten or split the text", param="input")
        return batch

    def embed_ids(self, batch: list[list[int]]) -> np.ndarray:
        """(n, dimensions) float32 embeddings of already tokenized inputs, run as one padded batch."""
        if not batch:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        ids, mask = pad_batch(batch, self.pad_token_id)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = self.session.run(None, feed)[0]
        except Exception as exc:  # onnxruntime's own error types
            raise BackendError(f"onnxruntime embedding run failed for batch {ids.shape}: {exc}",
                               "re-export the bundle; report it if it persists") from exc
        return pool(hidden, mask, self.pooling)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_ids(self.tokenize(texts))

    def step(self, batch):  # noqa: ANN001, ANN201 - protocol method that embedding bundles lack
        raise BackendError("an embedding bundle cannot generate text", "serve a causal-lm bundle for completions")

    def release(self, slot: int) -> None:
        return None

    def close(self) -> None:
        self.session = None
