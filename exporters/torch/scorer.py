"""The torch bundle's scorer for :mod:`edgeopt.evaluation.causal_lm`: its checkpoint in transformers, loaded the way
``edgeopt.runtimes.torch`` serves it (CUDA when present; on CPU fp16 is upcast, bf16 kept), so the metrics
measure what the server will compute, not a float32 copy of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.measuring.scorers import HFScorer


def load_scorer(bundle_dir: Path, manifest: Any, context: int, threads: int = 2) -> HFScorer:
    from edgeopt.runtimes.torch.loading import checkpoint_dtype, pick_dtype, read_config, serving_device

    model_dir = Path(bundle_dir) / manifest.model_file
    device = serving_device()
    dtype = pick_dtype("auto", checkpoint_dtype(read_config(model_dir)), device)
    return HFScorer(model_dir, threads, dtype=dtype, device=device.name)
