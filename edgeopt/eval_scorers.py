"""Scorers: anything that turns a token sequence into next-token logits, one per bundle format.

Evaluation is format-agnostic: it asks a scorer for logits and compares them with the original
Hugging Face model's. Each format's backend entry (:mod:`edgeopt.backends`) names a ``"module:function"``
loader, resolved lazily so that a missing backend only matters when its format is evaluated. A loader has the signature
``load_scorer(bundle_dir, manifest, context=..., threads=...) -> Scorer``; formats whose runtime has several KV
cache types also take ``kv_type=`` (edgeopt.evaluate_kv).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgeopt import backends
from edgeopt.errors import ConfigError, EvaluationError

class Scorer(Protocol):
    vocab_size: int

    def score(self, token_ids: list[int]) -> np.ndarray:
        """float32 logits of shape (len(token_ids), vocab): row i predicts token i+1."""
        ...

    def close(self) -> None: ...


def load_bundle_scorer(bundle_dir: Path, manifest: Any, context: int, threads: int = 2, **options: Any) -> Scorer:
    try:
        target = backends.backend(manifest.format).scorer
    except ConfigError as exc:
        raise EvaluationError(f"no scorer for bundle format {manifest.format!r}",
                              f"formats with evaluation: {', '.join(backends.formats())}") from exc
    try:
        loader = backends.load_attr(target)
    except ModuleNotFoundError as exc:
        raise EvaluationError(f"the {manifest.format} scorer module {target} is not available ({exc.name})",
                              "install the optimize extra: pip install 'edgeopt[optimize]'") from exc
    return loader(Path(bundle_dir), manifest, context=context, threads=threads, **options)


class HFScorer:
    """A checkpoint in transformers. By default float32 on CPU: the original, the reference distribution;
    a torch bundle's checkpoint is scored the same way in the dtype and on the device it is served with."""

    def __init__(self, model_dir: Path, threads: int = 2, dtype: str = "float32", device: str = "cpu") -> None:
        import torch

        from edgeopt.passes.measure import load_causal_lm

        torch.set_num_threads(threads)
        self._torch = torch
        self._device = device
        self._model = load_causal_lm(model_dir, getattr(torch, dtype)).to(device)
        self.vocab_size = int(self._model.config.vocab_size)

    def score(self, token_ids: list[int]) -> np.ndarray:
        with self._torch.no_grad():
            out = self._model(self._torch.tensor([token_ids], device=self._device))
        return out.logits[0].float().cpu().numpy()

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        """Greedy continuation (used to make evaluation text when the user gives none)."""
        with self._torch.no_grad():
            ids = self._torch.tensor([prompt_ids], device=self._device)
            out = self._model.generate(ids, attention_mask=self._torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                       do_sample=False, pad_token_id=self._model.config.eos_token_id)
        return out[0].tolist()

    def close(self) -> None:
        del self._model
