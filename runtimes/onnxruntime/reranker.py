"""Relevance scores from an exported cross-encoder: tokenize (query, document) pairs, pad a batch, run, activate.

Pairs are tokenized as ``CrossEncoder.predict`` tokenizes them: the tokenizer.json's pair template (BERT:
``[CLS] q [SEP] d [SEP]``, token types 0 then 1), cut to ``context_length`` tokens longest side first
(transformers' ``truncation=True``), never padded by the file's own padding. A reranker is asked about
long retrieved passages all the time, so pairs are cut rather than refused, as the original does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.encoders.cross_encoder import CrossEncoderConfig
from edgeopt.errors import BackendError
from edgeopt.runtimes.base import EncodedPair, RerankRuntime, RuntimeInfo
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer
from edgeopt.runtimes.pair_tokenizer import PairTokenizer


class OnnxRerankRuntime(RerankRuntime):
    """Serves rerank bundles; it has no KV cache and no engine."""

    def __init__(self, session: Any, tokenizer: BundleTokenizer, tokenizer_json: Path, config: CrossEncoderConfig,
                 info: RuntimeInfo, pad_token_id: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.config = config
        self.info = info
        self.pad_token_id = pad_token_id
        self._input_names = {i.name for i in session.get_inputs()}
        self._pairs = PairTokenizer(tokenizer_json, info.context_length)

    def encode_pairs(self, query: str, documents: list[str]) -> list[EncodedPair]:
        return self._pairs.encode(query, documents)

    def score_pairs(self, batch: list[EncodedPair]) -> np.ndarray:
        if not batch:
            return np.zeros((0,), dtype=np.float32)
        ids, types, mask = pad_pairs(batch, self.pad_token_id)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = types
        try:
            logits = self.session.run(None, feed)[0]
        except Exception as exc:  # onnxruntime's own error types
            raise BackendError(f"onnxruntime rerank run failed for batch {ids.shape}: {exc}",
                               "re-export the bundle; report it if it persists") from exc
        return self.config.scores(logits)

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        """Scores of every document for ``query``, in the order given (``CrossEncoder.predict``'s)."""
        return self.score_pairs(self.encode_pairs(query, documents))

    def close(self) -> None:
        self.session = None


def pad_pairs(batch: list[EncodedPair], pad_token_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, token types, attention mask), each (len(batch), longest) int64, padded on the right."""
    width = max(len(pair) for pair in batch)
    ids = np.full((len(batch), width), pad_token_id, dtype=np.int64)
    types = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for row, pair in enumerate(batch):
        ids[row, :len(pair)] = pair.ids
        types[row, :len(pair)] = pair.type_ids
        mask[row, :len(pair)] = 1
    return ids, types, mask
