"""Quality numbers (numpy only): perplexity, KL divergence and top-1 agreement from logits; cosine
and nearest-neighbour agreement from embeddings.

Logit functions take float arrays of shape (n_positions, vocab) where row i predicts token i+1;
embedding functions take (n_texts, dimensions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.errors import EvaluationError

KL_ROWS_PER_BLOCK = 32


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def kl_per_position(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """KL(reference || candidate) of each row's next-token distribution (>= 0 up to rounding, clipped)."""
    ref_lp, cand_lp = log_softmax(reference), log_softmax(candidate)
    return np.clip((np.exp(ref_lp) * (ref_lp - cand_lp)).sum(axis=-1), 0.0, None)


def mean_kl(reference: np.ndarray, candidate: np.ndarray) -> float:
    return float(kl_per_position(reference, candidate).mean())


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    return float(np.mean(reference.argmax(axis=-1) == candidate.argmax(axis=-1)))


def row_cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of reference with the same row of candidate."""
    num = np.sum(reference * candidate, axis=1)
    den = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    return num / np.clip(den, 1e-12, None)


def min_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    return float(row_cosines(reference, candidate).min())


def neighbour_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows whose most similar other row is the same under both sets of embeddings: does a
    search over these texts still return the same nearest hit?"""
    if len(reference) < 2:
        raise EvaluationError(f"neighbour agreement needs at least 2 texts, got {len(reference)}",
                              "evaluate on a file with more lines")
    return float(np.mean(_nearest_other(reference) == _nearest_other(candidate)))


def _nearest_other(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def mean_nll(logits: np.ndarray, tokens: list[int] | np.ndarray) -> tuple[float, int]:
    """Sum-free mean negative log-likelihood of tokens[1:] given rows [:-1], and how many were scored."""
    ids = np.asarray(tokens)
    if len(ids) < 2:
        return 0.0, 0
    targets, total = ids[1:], 0.0
    for start in range(0, len(targets), KL_ROWS_PER_BLOCK):  # blocks of rows: see Comparison.add
        block = log_softmax(logits[start:min(start + KL_ROWS_PER_BLOCK, len(targets))])
        total += float(block[np.arange(len(block)), targets[start:start + len(block)]].sum())
    return -total / len(targets), len(targets)


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
        if candidate is not reference:  # a model against itself (its perplexity alone) agrees everywhere
            # Rows a block at a time: the float64 log-softmax of a whole 256-token window of a 128k vocabulary is
            # 256 MiB an array, and KL holds five of them.
            for start in range(0, reference.shape[0], KL_ROWS_PER_BLOCK):
                rows = slice(start, start + KL_ROWS_PER_BLOCK)
                self.kl_sum += float(kl_per_position(reference[rows], candidate[rows]).sum())
            self.agree += int((reference.argmax(axis=-1) == candidate.argmax(axis=-1)).sum())
        else:
            self.agree += reference.shape[0]
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
