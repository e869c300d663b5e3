"""The ONNX bundle's scorer for :mod:`edgeopt.evaluation.causal_lm`: token ids -> logits at every position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import EvaluationError


class OnnxScorer:
    def __init__(self, model_path: Path, context: int, threads: int = 2) -> None:
        from edgeopt.runtimes.onnxruntime.decoder_session import DecoderSession
        from edgeopt.runtimes.onnxruntime.session import create_session

        self._decoder = DecoderSession(create_session(model_path, threads, ["CPUExecutionProvider"]))
        self.vocab_size = self._decoder.vocab_size
        self.context = context

    def score(self, token_ids: list[int]) -> np.ndarray:
        """float32 (len(token_ids), vocab) logits; row i predicts token i+1."""
        if len(token_ids) > self.context:
            raise EvaluationError(f"scoring window of {len(token_ids)} tokens exceeds the context {self.context}",
                                  "use a smaller evaluation window")
        return self._decoder.logits_for(token_ids)

    def close(self) -> None:
        self._decoder = None  # type: ignore[assignment]


def load_scorer(bundle_dir: Path, manifest: Any, context: int, threads: int = 2) -> OnnxScorer:
    if manifest.kind != "causal-lm":
        raise EvaluationError(f"bundle kind {manifest.kind!r} has no next-token logits to score",
                              "embedding bundles are checked by cosine similarity at export time")
    return OnnxScorer(Path(bundle_dir) / manifest.model_file, context, threads)
