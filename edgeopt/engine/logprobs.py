"""Token log-probabilities for the ``logprobs`` / ``top_logprobs`` / ``echo`` request fields.

Which logits: the ones the sampler draws from *before* temperature and truncation, i.e. the model's
logits after repetition/presence/frequency penalties, ``logit_bias`` and the grammar's token mask
(:func:`edgeopt.engine.sampler.processed_logits`), normalised with a log-softmax. This is what OpenAI
documents (``logit_bias`` changes the reported logprobs) and a grammar mask is the same kind of edit: a
token the constraint forbids has probability 0, so it is never listed among ``top_logprobs``, and the
chosen token's logprob is always finite. Temperature, top-k, top-p and min-p only shape the draw and are
left out, so logprobs do not change when only the sampling randomness does (vLLM's default does the same).
Prompt logprobs (echo) have no penalties or mask: they are the raw log-softmax of each position.
"""

from __future__ import annotations

import numpy as np

from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.scheduled import ScheduledChunk

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs (chat) and logprobs (completions: 5, we allow 20)


def log_softmax(row: np.ndarray) -> np.ndarray:
    """float64 log-softmax that tolerates -inf entries (masked tokens stay -inf)."""
    row = np.asarray(row, dtype=np.float64)
    best = row.max()
    if not np.isfinite(best):
        return np.where(row == best, 0.0, -np.inf) if best == np.inf else np.full_like(row, -np.inf)
    with np.errstate(under="ignore"):
        shifted = row - best
        return shifted - np.log(np.exp(shifted).sum())


def token_logprob(logprobs: np.ndarray, token: int, top: int) -> TokenLogprob:
    """``token``'s entry of a log-softmax row and the ``top`` best entries (ties: lower id first); tokens
    with probability 0 are never listed, so fewer than ``top`` may come back."""
    return TokenLogprob(token, float(logprobs[token]), top_entries(logprobs, top))


def top_entries(logprobs: np.ndarray, top: int) -> tuple[tuple[int, float], ...]:
    if top <= 0:
        return ()
    top = min(top, logprobs.shape[0])
    candidates = np.argpartition(-logprobs, top - 1)[:top]
    order = np.lexsort((candidates, -logprobs[candidates]))  # by logprob descending, then id
    return tuple((int(candidates[i]), float(logprobs[candidates[i]])) for i in order
                 if np.isfinite(logprobs[candidates[i]]))


def extend_prompt_logprobs(entries: list[TokenLogprob | None], prompt_ids: list[int], start_pos: int,
                           rows: np.ndarray, top: int) -> None:
    """Append the logprobs a prefill chunk's rows give: ``rows[j]`` (the logits after the token at
    ``start_pos + j``) scores prompt token ``start_pos + j + 1``. ``entries`` starts as [None]: the first
    prompt token has no context that predicts it, as OpenAI's echo reports it. A row past the prompt's
    end predicts the first generated token and is not a prompt logprob."""
    for j, row in enumerate(rows):
        target = start_pos + j + 1
        if target == len(entries) and target < len(prompt_ids):
            entries.append(token_logprob(log_softmax(row), prompt_ids[target], top))


def sampling_rows(chunks: list[ScheduledChunk], logits: np.ndarray) -> np.ndarray:
    """One row per chunk that samples. Chunks with all_logits brought a row per token: those feed
    their sequence's prompt logprobs, and their last row (if it samples) is the one kept; a chunk with a
    draft keeps none (edgeopt.engine.speculation.verify reads its rows)."""
    if not any(c.all_logits for c in chunks):
        return logits
    keep: list[int] = []
    at = 0
    for chunk in chunks:
        rows = len(chunk.tokens) if chunk.all_logits else int(chunk.want_logits)
        seq = chunk.seq
        if chunk.all_logits and not chunk.draft and seq.prompt_logprobs is not None and seq.params.prompt_logprobs is not None:
            extend_prompt_logprobs(seq.prompt_logprobs, seq.prompt_ids, chunk.start_pos, logits[at:at + rows],
                                   seq.params.prompt_logprobs)
        if chunk.want_logits and not chunk.draft:  # a drafted chunk's rows are verified, not sampled here
            keep.append(at + rows - 1)
        at += rows
    return logits[keep]
