"""A sampling row's whole distribution as a probability vector, for the draft model's acceptance rule.

Plain decoding never needs it (it draws one token, edgeopt.engine.sampler); speculative sampling with a draft
model does: a drafted token d drawn from the draft's q is kept with probability min(1, p(d) / q(d)) and
otherwise replaced by a draw from norm(max(0, p - q)), which leaves every emitted token distributed as p
(Leviathan et al. 2023, Chen et al. 2023). So p must be exactly what the sampler draws from: the same
penalties and logit_bias (processed_logits), temperature, top-k, top-p and min-p, in the sampler's order.
"""

from __future__ import annotations

import numpy as np

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sampler import _nucleus, _pick, processed_logits
from edgeopt.engine.sequence import Sequence


def sampling_distribution(row: np.ndarray, seq: Sequence) -> np.ndarray:
    """The float64 probabilities the sampler draws ``seq``'s next token from, given ``row`` (temperature > 0:
    at temperature 0 the distribution is a point, which the greedy path compares directly)."""
    return truncated_softmax(processed_logits(row, seq), seq.params)


def truncated_softmax(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """softmax(logits / temperature) cut by top-k, then top-p, then min-p, renormalised (float64); a row with
    no finite logit puts all its mass on token 0, as the sampler's greedy fallback does."""
    assert params.temperature > 0.0, "a greedy row has no spread to compare"
    best = logits.max()
    probs = np.zeros(logits.shape[0], dtype=np.float64)
    if not np.isfinite(best):
        probs[int(np.argmax(logits)) if best == np.inf else 0] = 1.0
        return probs
    with np.errstate(under="ignore"):
        weights = np.exp((logits - best) / params.temperature)  # the best token weighs 1
    keep = np.ones(logits.shape[0], dtype=bool)
    if 0 < params.top_k < logits.shape[0]:
        keep[:] = False
        keep[np.argpartition(weights, logits.shape[0] - params.top_k)[-params.top_k:]] = True
    if params.top_p < 1.0:
        kept = np.flatnonzero(keep)
        nucleus = kept[_nucleus(weights[kept].astype(np.float32), params.top_p)]
        keep[:] = False
        keep[nucleus] = True
    if params.min_p > 0.0:
        keep &= weights >= min(params.min_p, 1.0)
    probs[keep] = weights[keep]
    return probs / probs.sum()


def draw_from(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn from a probability vector (its sum need not be exactly 1), as the sampler draws."""
    return _pick(probs, rng.random())
