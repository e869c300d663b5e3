"""The original cross-encoder's relevance scores: what a rerank bundle is compared with, when it is exported
(exporters/onnx/rerank.py) and when it is evaluated (edgeopt/evaluation/rerank.py). The sequence classifier in
transformers (fp32) plus the activation of its sentence-transformers configuration, which is what
``CrossEncoder.predict`` computes; needs torch and transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.encoders.cross_encoder import CrossEncoderConfig
from edgeopt.runtimes.base import EncodedPair


def torch_rerank_scores(model_dir: Path, pairs: list[EncodedPair], config: CrossEncoderConfig,
                        batch_size: int = 16) -> np.ndarray:
    """(len(pairs),) scores of already tokenized pairs, in padded batches of ``batch_size``."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from edgeopt.runtimes.onnxruntime.reranker import pad_pairs

    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    pad = model.config.pad_token_id or 0
    rows = []
    for start in range(0, len(pairs), batch_size):
        ids, types, mask = pad_pairs(pairs[start:start + batch_size], pad)
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                           attention_mask=torch.from_numpy(mask)).logits
        rows.append(config.scores(logits.numpy()))
    return np.concatenate(rows) if rows else np.zeros((0,), dtype=np.float32)
