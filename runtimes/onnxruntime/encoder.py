"""Sentence embeddings from an exported encoder: tokenize, pad a batch, run, pool, normalize.

Texts are tokenized unpadded (edgeopt.runtimes.bundle_tokenizer switches off a tokenizer.json's own
padding and truncation), so the attention mask of a batch marks exactly the tokens the tokenizer
produced and pooling never counts padding. Inputs longer than ``info.context_length`` (the position
table, or sentence-transformers' ``max_seq_length`` when smaller) are refused with a 400 rather than
truncated: an OpenAI-style client is told, not silently given the vector of a shorter text.
``embed(texts, truncate=True)`` truncates exactly as sentence-transformers does instead.
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import BackendError, ContextOverflowError
from edgeopt.runtimes.base import EmbeddingRuntime, RuntimeInfo
from edgeopt.encoders.pooling import PoolingConfig, pad_batch, pool
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer


class OnnxEmbeddingRuntime(EmbeddingRuntime):
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

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Unpadded token ids with special tokens; too long is an error unless ``truncate``, which cuts
        to ``context_length`` as sentence-transformers does (text cut, special tokens kept)."""
        limit = self.info.context_length
        batch = self.tokenizer.encode_batch(texts, add_special=True, max_length=limit if truncate else None)
        for i, ids in enumerate(batch):
            if len(ids) > limit:
                raise ContextOverflowError(
                    f"input {i} has {len(ids)} tokens, more than the model's {limit}{self._limit_source()}",
                    "shorten or split the text", param="input")
        return batch

    def _limit_source(self) -> str:
        if self.pooling.max_seq_length is not None and self.pooling.max_seq_length == self.info.context_length:
            return " (max_seq_length of its sentence-transformers configuration)"
        return ""

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

    def embed(self, texts: list[str], truncate: bool = False) -> np.ndarray:
        return self.embed_ids(self.tokenize(texts, truncate))

    def close(self) -> None:
        self.session = None
