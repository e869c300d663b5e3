"""Pick each sequence's next token from its logits row (numpy only, no per-token Python loops).

Order, as in llama.cpp and vLLM: repetition / presence / frequency penalties -> logit_bias ->
temperature (0 = greedy) -> top-k -> top-p -> min-p -> draw with the request's own generator.
A batch where every row is plain greedy takes one vectorised ``argmax``.
"""

from __future__ import annotations

import numpy as np

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sequence import Sequence

# Tokens whose logit is this far below the best have probability < e^-30 (~1e-13) each: dropping them
# before sorting keeps sampling O(candidates) instead of O(vocab log vocab) on 150k-token vocabularies.
_NEGLIGIBLE_LOGIT_GAP = 30.0


def needs_logit_processing(params: SamplingParams) -> bool:
    return bool(params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
                or params.logit_bias)


def is_plain_greedy(params: SamplingParams) -> bool:
    return params.temperature == 0.0 and not needs_logit_processing(params)


def sample_next_tokens(logits: np.ndarray, seqs: list[Sequence]) -> list[int]:
    """One token per row of ``logits`` (shape: len(seqs) x vocab)."""
    assert logits.shape[0] == len(seqs), (logits.shape, len(seqs))
    if not seqs:
        return []
    if all(is_plain_greedy(s.params) for s in seqs):
        return np.argmax(logits, axis=1).tolist()
    return [sample_row(logits[i], seq) for i, seq in enumerate(seqs)]


def sample_row(row: np.ndarray, seq: Sequence) -> int:
    params = seq.params
    if needs_logit_processing(params):
        row = apply_penalties_and_bias(row.astype(np.float64), seq)
    if params.temperature == 0.0:
        return int(np.argmax(row))
    return _draw(row.astype(np.float64) / params.temperature, params, seq.rng)


def apply_penalties_and_bias(row: np.ndarray, seq: Sequence) -> np.ndarray:
    """Modify a float64 copy of the logits in place and return it."""
    params = seq.params
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.asarray(seq.all_ids, dtype=np.int64))
        values = row[seen]
        # CTRL-style: shrink positive logits, push negative ones further down.
        row[seen] = np.where(values > 0, values / params.repetition_penalty, values * params.repetition_penalty)
    if (params.presence_penalty or params.frequency_penalty) and seq.output_ids:
        ids, counts = np.unique(np.asarray(seq.output_ids, dtype=np.int64), return_counts=True)
        row[ids] -= counts * params.frequency_penalty + params.presence_penalty
    if params.logit_bias:
        ids = np.fromiter(params.logit_bias.keys(), dtype=np.int64, count=len(params.logit_bias))
        row[ids] += np.fromiter(params.logit_bias.values(), dtype=np.float64, count=len(params.logit_bias))
    return row


def _draw(scaled: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    candidates = _candidate_ids(scaled, params.top_k)
    values = scaled[candidates]
    order = np.argsort(-values, kind="stable")
    candidates, values = candidates[order], values[order]
    probs = np.exp(values - values[0])
    probs /= probs.sum()
    keep = len(probs)
    if params.top_p < 1.0:
        # The smallest prefix whose mass reaches top_p (always at least one token).
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    cumulative = np.cumsum(probs[:keep])
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(candidates[min(index, keep - 1)])


def _candidate_ids(scaled: np.ndarray, top_k: int) -> np.ndarray:
    vocab = scaled.shape[0]
    if 0 < top_k < vocab:
        return np.argpartition(-scaled, top_k - 1)[:top_k]
    return np.flatnonzero(scaled >= scaled.max() - _NEGLIGIBLE_LOGIT_GAP)
