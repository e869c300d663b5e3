"""The original checkpoint's sentence embeddings: what an embedding bundle is compared with, when it is
exported (exporters/onnx/encoder.py) and when it is evaluated (edgeopt/evaluation/embeddings.py), whatever
its format. The encoder twin of :class:`edgeopt.measuring.scorers.HFScorer`; needs torch and transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.encoders.pooling import PoolingConfig, pad_batch, pool


def torch_embeddings(model_dir: Path, token_ids: list[list[int]], pooling: PoolingConfig,
                     batch_size: int = 16) -> np.ndarray:
    """The checkpoint's own sentence embeddings (transformers, fp32), in padded batches of batch_size."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    pad = model.config.pad_token_id or 0  # RoBERTa derives positions from it
    rows = []
    for start in range(0, len(token_ids), batch_size):
        ids, mask = pad_batch(token_ids[start:start + batch_size], pad)
        with torch.no_grad():
            hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
        rows.append(pool(hidden.numpy(), mask, pooling))
    return np.concatenate(rows)
