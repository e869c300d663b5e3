"""Quality numbers from logits: perplexity, KL divergence and top-1 agreement (numpy only).

All functions take float logits of shape (n_positions, vocab) where row i predicts token i+1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.errors import EvaluationError


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def mean_nll(logits: np.ndarray, tokens: list[int] | np.ndarray) -> tuple[float, int]:
    """Sum-free mean negative log-likelihood of tokens[1:] given rows [:-1], and how many were scored."""
    ids = np.asarray(tokens)
    if len(ids) < 2:
        return 0.0, 0
    logp = log_softmax(logits[: len(ids) - 1])
    picked = logp[np.arange(len(ids) - 1), ids[1:]]
    return float(-picked.mean()), len(ids) - 1


@dataclass
class Comparison:
    """Running sums over many windows, so long texts are compared without holding all logits."""

    kl_sum: float = 0.0
    agree: int = 0
    positions: int = 0
    nll_sum: float = 0.0
    nll_count: int = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray, tokens: list[int] | None = None) -> None:
        """Compare next-token distributions row by row: KL(reference || candidate) and argmax match."""
        if reference.shape != candidate.shape:
            raise EvaluationError(f"logit shapes differ: reference {reference.shape}, candidate {candidate.shape}",
                                  "compare a bundle with the model it was made from (same vocabulary)")
        ref_lp, cand_lp = log_softmax(reference), log_softmax(candidate)
        kl = (np.exp(ref_lp) * (ref_lp - cand_lp)).sum(axis=-1)
        self.kl_sum += float(np.clip(kl, 0.0, None).sum())
        self.agree += int((reference.argmax(axis=-1) == candidate.argmax(axis=-1)).sum())
        self.positions += reference.shape[0]
        if tokens is not None:
            nll, count = mean_nll(candidate, tokens)
            self.nll_sum += nll * count
            self.nll_count += count

    @property
    def mean_kl(self) -> float:
        return self.kl_sum / max(self.positions, 1)

    @property
    def top1_agreement(self) -> float:
        return self.agree / max(self.positions, 1)

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll_sum / self.nll_count)) if self.nll_count else float("nan")
