"""Pick each sequence's next token from its logits row (numpy only, no per-token Python loops).

Order, as in llama.cpp and vLLM: repetition / presence / frequency penalties -> logit_bias -> the
grammar's token mask (constrained decoding) -> temperature (0 = greedy) -> top-k -> top-p -> min-p -> draw with the request's own generator.
A batch where every row is plain greedy takes one vectorised ``argmax``; under grammar masks, one bit test
per row checks the pick, and only rows whose pick the grammar forbids unpack their mask.

Total for any input: whatever the logits hold (NaN, +-inf, overflow after a penalty) and whatever the
parameters (validation bounds them, but the sampler does not rely on it), a valid token id of the row
comes back. NaN counts as -inf. A row whose best logit is +inf or that has no finite logit cannot be
normalised into a distribution, so it falls back to greedy: the first +inf token, or token 0 when
every logit is -inf/NaN (a defined, reproducible choice; the runtime produced no usable scores).
"""

from __future__ import annotations

import math

import numpy as np

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.token_bitmask import allowed_tokens, tokens_allowed

# A greedy pick the grammar forbids is redone over the allowed tokens alone when they lie in at most this
# many 32-token words (8k tokens); denser masks are unpacked into a bool row instead.
_SPARSE_MASK_WORDS = 256


def needs_logit_processing(params: SamplingParams) -> bool:
    return bool(params.repetition_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
                or params.logit_bias)


def is_plain_greedy(params: SamplingParams) -> bool:
    return params.temperature == 0.0 and not needs_logit_processing(params)


def mask_can_wait(params: SamplingParams) -> bool:
    """Whether a constrained row may be drawn from its unmasked logits, keeping the pick when the grammar
    allows it and drawing again under the mask when not (edgeopt.engine.constraint explains why that is
    exact): greedy, or temperature over the whole vocabulary. Not with top-k / top-p / min-p, whose cut
    depends on which tokens the mask leaves, nor with logprobs, which report the masked distribution.
    (The draw's float32 exponentials drop tokens below e^-87 of the best candidate, so the masked draw may
    keep allowed tokens the unmasked one dropped, each below e^-87 of the unmasked best: the two
    distributions differ by under 1e-37 per token, as float32 itself already differs from the exact softmax.)"""
    if params.logprobs is not None:
        return False
    truncates = 0 < params.top_k or params.top_p < 1.0 or params.min_p > 0.0
    return params.temperature == 0.0 or not truncates


def sample_next_tokens(logits: np.ndarray, seqs: list[Sequence], bitmask: np.ndarray | None = None) -> list[int]:
    """One token per row of ``logits`` (shape: len(seqs) x vocab). ``bitmask``, when given, holds each row's
    grammar mask packed as llguidance fills it (see edgeopt.engine.token_bitmask; all ones for unconstrained
    rows): no other token can be drawn."""
    assert logits.shape[0] == len(seqs), (logits.shape, len(seqs))
    if not seqs:
        return []
    vocab = logits.shape[1]
    if all(is_plain_greedy(s.params) for s in seqs):
        tokens = _batch_argmax(logits)
        if bitmask is not None:
            # The raw row's first best token, when the grammar allows it, is also the masked row's first
            # best token (masking only lowers other logits): one bit test per row. Only the rows whose pick
            # is forbidden pay for unpacking their mask and a masked argmax.
            for i in np.flatnonzero(~tokens_allowed(bitmask, np.array(tokens))):
                tokens[i] = masked_greedy(logits[i], bitmask[i])
        return tokens
    return [sample_row(logits[i], seq, None if bitmask is None or seq.constraint is None
                       else allowed_tokens(bitmask[i], vocab)) for i, seq in enumerate(seqs)]


def sample_masked_row(row: np.ndarray, seq: Sequence, packed_mask: np.ndarray) -> int:
    """Draw ``row`` again under its packed grammar mask, for a row whose unmasked pick the grammar refused:
    a view of the batch's row goes in (no copy of the batch), and a greedy row skips the argmax it already
    knows is forbidden."""
    if is_plain_greedy(seq.params):
        return masked_greedy(row, packed_mask)
    return sample_row(row, seq, allowed_tokens(packed_mask, row.shape[0]))


def processed_logits(row: np.ndarray, seq: Sequence, allowed: np.ndarray | None = None) -> np.ndarray:
    """The logits the draw starts from, as a float64 copy: penalties and logit_bias applied, tokens outside
    ``allowed`` (the grammar's mask) and NaN set to -inf. Logprobs are computed from these too."""
    with np.errstate(all="ignore"):
        row = np.array(row, dtype=np.float64)  # a copy: the runtime's buffer is never modified
        if needs_logit_processing(seq.params):
            row = apply_penalties_and_bias(row, seq)
        row[np.isnan(row)] = -np.inf
        if allowed is not None:
            np.copyto(row, -np.inf, where=~allowed)
    return row


def sample_row(row: np.ndarray, seq: Sequence, allowed: np.ndarray | None = None) -> int:
    params = seq.params
    if allowed is None and params.temperature > 0.0 and not needs_logit_processing(params):
        scaled = _plain_scaled(row, params.temperature)
        if scaled is not None:
            return _draw(scaled, params, seq.rng)
    row = processed_logits(row, seq, allowed)
    # Overflow (x / 5e-324), inf - inf and 0 * inf are expected on degenerate rows and handled below.
    with np.errstate(all="ignore"):
        best = row.max()
        if not params.temperature > 0.0 or not np.isfinite(best):
            return greedy(row)
        # Centre on the best logit before dividing: values become <= 0, so a tiny temperature sends
        # the others to -inf (probability 0) instead of overflowing the best one to +inf (NaN after exp).
        # In place (the row is the sampler's own copy): each fresh array of a vocabulary row costs more in
        # memory traffic than the arithmetic, right after a forward pass has flushed the caches.
        scaled = np.subtract(row, best, out=row)
        np.divide(scaled, params.temperature, out=scaled)
        scaled[np.isnan(scaled)] = -np.inf  # -inf / inf
        return _draw(scaled, params, seq.rng)


def _plain_scaled(row: np.ndarray, temperature: float) -> np.ndarray | None:
    """``(row - max) / temperature`` as a new float32 row, for a row no penalty, bias or mask touches, in three
    passes over the vocabulary instead of the general path's seven and with no float64 copy (2 MiB a token on
    a 262k vocabulary). Each operation rounds to float32 once, where the general path keeps the difference
    exact in float64 and rounds once at the draw: the probabilities differ in their last float32 bit (and the
    temperature is taken as the nearest float32), far below what any draw can tell. None when the row holds a
    NaN or +inf (``max`` is then not finite: NaN propagates through it) or when the temperature has no
    positive finite float32, or for a row that is not float32 (runtimes return float32; a float64 row's values
    may not fit one): the general path handles those."""
    if row.dtype != np.float32:
        return None
    best = row.max()
    divisor = np.float32(temperature)
    if not math.isfinite(best) or not 0.0 < divisor < np.inf:
        return None
    with np.errstate(over="ignore", under="ignore"):  # what overflows goes to -inf: probability 0, as it would
        scaled = np.subtract(row, best)  # -inf entries stay -inf
        np.divide(scaled, divisor, out=scaled)  # a tiny temperature sends the others to -inf
    return scaled


def greedy(row: np.ndarray) -> int:
    """argmax with NaN treated as -inf; token 0 when nothing is finite or +inf."""
    return int(np.argmax(np.where(np.isnan(row), -np.inf, row)))


def masked_greedy(row: np.ndarray, packed_mask: np.ndarray) -> int:
    """``greedy`` over the tokens a packed grammar mask allows (token 0 when none has a usable logit, as
    greedy over a fully masked row gives). Where the grammar allows few tokens (JSON structure: a quote,
    a digit, a key), only those are gathered instead of unpacking the whole vocabulary."""
    words = np.flatnonzero(packed_mask)
    if len(words) > _SPARSE_MASK_WORDS:
        return greedy(np.where(allowed_tokens(packed_mask, row.shape[0]), row, -np.inf))
    bits = np.unpackbits(packed_mask[words].view(np.uint8), bitorder="little").view(bool).reshape(-1, 32)
    ids = (words[:, None] * 32 + np.arange(32))[bits]  # ascending, so argmax keeps the first of a tie
    ids = ids[ids < row.shape[0]]
    values = row[ids]
    values = np.where(np.isnan(values), -np.inf, values)
    if not len(ids) or values.max() == -np.inf:
        return 0
    return int(ids[np.argmax(values)])


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


def _batch_argmax(logits: np.ndarray) -> list[int]:
    """Each row's first best token. Few numpy calls: this runs on every decode step, right after a forward
    pass has flushed the caches, where each call costs tens of microseconds."""
    tokens: list[int] = logits.argmax(axis=1).tolist()
    for i, token in enumerate(tokens):
        if math.isnan(logits[i, token]):  # np.argmax stops at a row's first NaN: exactly the rows holding one
            tokens[i] = greedy(logits[i])
    return tokens


def _draw(scaled: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Sample from ``scaled`` (finite-or--inf values, max exactly 0) after top-k / top-p / min-p.

    Nothing is sorted unless top_p asks for an order, and then only the tokens near the top; probabilities
    over the whole vocabulary are float32 exponentials computed in place (numpy's float64 exp is ten times
    slower; float32 keeps every token above e^-87 of the best), drawn from by block sums. Sorting and
    gathering every candidate in float64 cost 6.5 ms a token over a 49k vocabulary, more than a 135M
    model's whole decode step on two cores; this costs 0.15 ms in a loop, 0.5 ms between decode steps."""
    candidates: np.ndarray | None = None
    if 0 < params.top_k < scaled.shape[0]:
        candidates = np.argpartition(scaled, scaled.shape[0] - params.top_k)[-params.top_k:]
        probs = np.exp(scaled[candidates])
    else:
        # The sampler's own row: a float32 one (the plain path's) is exponentiated in place, without a copy.
        probs = scaled if scaled.dtype == np.float32 else scaled.astype(np.float32)
        np.exp(probs, out=probs)  # -inf -> 0
    if params.top_p < 1.0:
        nucleus = _nucleus(probs, params.top_p)
        candidates = nucleus if candidates is None else candidates[nucleus]
        probs = probs[nucleus]
    if params.min_p > 0.0:  # the best token's probability is exp(0) = 1: it always survives
        probs = np.where(probs >= min(params.min_p, 1.0), probs, 0.0).astype(probs.dtype)
    index = _pick(probs, rng.random())
    return int(index if candidates is None else candidates[index])


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest set of most probable entries whose mass reaches ``top_p`` (at least one),
    best first (ties in index order). The best entry is 1, so only entries above a bar relative to it are
    sorted, the bar lowered until they hold the mass: the set above a bar is itself a best-first prefix."""
    target = top_p * float(probs.sum(dtype=np.float64))
    bar = 1e-3
    while True:
        head = np.flatnonzero(probs >= bar)
        if bar == 0.0 or float(probs[head].sum(dtype=np.float64)) >= target:
            break
        bar = bar * 1e-3 if bar > 1e-30 else 0.0
    order = head[np.argsort(-probs[head], kind="stable")]
    reached = np.cumsum(probs[order], dtype=np.float64)
    return order[:min(len(order), int(np.searchsorted(reached, target, side="left")) + 1)]


_PICK_BLOCK = 1024


def _pick(probs: np.ndarray, uniform: float) -> int:
    """The index i with ``uniform`` (in [0, 1)) in i's share of the cumulative mass, in float64: block sums
    first, then one block's cumulative sum, instead of a cumulative sum over the whole vocabulary."""
    starts = np.arange(0, len(probs), _PICK_BLOCK)
    block_mass = np.cumsum(np.add.reduceat(probs, starts, dtype=np.float64))
    target = uniform * block_mass[-1]
    block = min(int(np.searchsorted(block_mass, target, side="right")), len(starts) - 1)
    start = int(starts[block])
    inside = np.cumsum(probs[start:start + _PICK_BLOCK], dtype=np.float64)
    index = start + int(np.searchsorted(inside, target - (block_mass[block - 1] if block else 0.0), side="right"))
    while index >= len(probs) or (probs[index] == 0.0 and index > 0):  # rounding past the end: the last
        index -= 1  # drawable entry
    return index
