"""Verify a block the draft model drew by sampling: speculative sampling's acceptance rule.

Row i of the block is the target's next-token logits after the drafted tokens before it; the draft drew d_i
from q_i. d_i is kept with probability min(1, p_i(d_i) / q_i(d_i)), where p_i is the distribution the sampler
would draw from (edgeopt.engine.speculation.distribution); at the first refusal the emitted token is drawn
from norm(max(0, p_i - q_i)) and the walk ends; when every drafted token is kept, the last row gives a bonus
token drawn as an ordinary step draws it. Every emitted token is then distributed exactly as p (the
probability of emitting t is q(t) min(1, p(t)/q(t)) + (1 - sum min(p, q)) max(0, p(t) - q(t)) / sum max(0,
p - q) = min(p(t), q(t)) + max(0, p(t) - q(t)) = p(t)). Unlike n-gram drafts (one-point q: draw from p and
compare, edgeopt.engine.speculation.verify), a seeded request does not give plain decoding's tokens here:
the same distribution, other draws.

Greedy blocks (temperature 0) are the ordinary verifier's: the draft proposed its argmax, the target's argmax
is compared with it. Constrained requests that sample are never drafted by the model (their p would need the
grammar's mask on every row).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.logprobs import log_softmax, token_logprob
from edgeopt.engine.sampler import processed_logits
from edgeopt.engine.scheduled import Pick
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation.distribution import draw_from, sampling_distribution

Draw = Callable[[np.ndarray, Sequence], Pick]


def verify_sampled_block(seq: Sequence, draft: tuple[int, ...], draft_probs: list[np.ndarray], rows: np.ndarray,
                         draw: Draw, ledger) -> int:  # ledger: verify.DraftLedger (imported there: no cycle)
    """Apply the acceptance rule to ``rows`` (len(draft) + 1 of them), appending the emitted tokens; returns how
    many drafted tokens were kept."""
    assert len(rows) == len(draft) + 1 and len(draft_probs) >= len(draft), (len(rows), draft, len(draft_probs))
    for i, d in enumerate(draft):
        p = sampling_distribution(rows[i], seq)
        q = draft_probs[i]
        if seq.rng.random() * q[d] < p[d]:  # kept with probability min(1, p(d) / q(d)); q(d) > 0: d was drawn
            ledger.keep_drafted(seq)
            ledger.append_token(seq, d, _logprob(rows[i], seq, d))
            if seq.state.is_done:
                return i + 1
            continue
        residual = np.maximum(p - q, 0.0)
        token = draw_from(residual if residual.sum() > 0.0 else p, seq.rng)
        ledger.drop_drafted(seq)
        ledger.append_token(seq, token, _logprob(rows[i], seq, token))
        return i
    pick = draw(rows[len(draft)], seq)  # every drafted token kept: the bonus token, an ordinary draw
    ledger.drop_drafted(seq)
    ledger.append_token(seq, pick.token, pick.logprob)
    return len(draft)


def _logprob(row: np.ndarray, seq: Sequence, token: int) -> TokenLogprob | None:
    """As the step sampler reports it: from the processed logits (no grammar: these requests have none)."""
    if seq.params.logprobs is None:
        return None
    return token_logprob(log_softmax(processed_logits(row, seq)), token, seq.params.logprobs)
