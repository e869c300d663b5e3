"""Walk one sequence's verified block: draw each token from the target, keep drafted KV while they agree.

A speculating sequence fed ``[last, d1, .., dk]`` at positions p .. p+k and got k + 1 logits rows: row i is
the target's next-token distribution after ``d1 .. di``. Row 0 is drawn exactly as an ordinary decode step
would draw it (same processed logits: penalties over the same history, logit_bias, grammar mask, same
generator). While the drawn token equals the drafted one, the drafted token's KV is the target's own and is
kept, and the next row is the next step's distribution, drawn the same way; the first disagreement (or the
last row, a bonus token) ends the walk, and the KV of the drafted tokens after it is dropped.

So every emitted token is a draw from the target's processed distribution given the tokens before it: at
temperature 0 the output is the one plain decoding gives; when sampling it has plain decoding's
distribution (a deterministic draft accepted with the target's probability of that token is exactly
rejection sampling with a one-point draft distribution), and with a seed it draws the same numbers in the
same order, so it gives the same tokens. Stop strings, max_tokens and a complete grammar end the walk where
they end the request: its remaining drafted KV is dropped before the sequence finishes, so the prefix cache
only ever keeps the KV of emitted tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgeopt.engine.api import TokenLogprob
from edgeopt.engine.scheduler import ScheduledChunk
from edgeopt.engine.sequence import Sequence

Draw = Callable[[np.ndarray, Sequence], tuple[int, "TokenLogprob | None"]]


def verify_block(seq: Sequence, draft: tuple[int, ...], rows: np.ndarray, draw: Draw,
                 keep_drafted: Callable[[Sequence], None], drop_drafted: Callable[[Sequence], None],
                 append: Callable[[Sequence, int, TokenLogprob | None], None]) -> int:
    """Draw and append tokens from ``rows`` (len(draft) + 1 of them) until one differs from the draft, the
    rows run out or the sequence finishes; returns how many drafted tokens were emitted."""
    assert len(rows) == len(draft) + 1, (len(rows), draft)
    accepted = 0
    for i, row in enumerate(rows):
        token, logprob = draw(row, seq)
        follows = i < len(draft) and token == draft[i]
        if follows:
            keep_drafted(seq)  # the KV at this token's position is the target's own: computed
            accepted += 1
        else:
            drop_drafted(seq)  # before appending: finishing parks exactly the emitted tokens' KV
        append(seq, token, logprob)
        if not follows or seq.state.is_done:
            break
    return accepted


def draft_blocks(chunks: list[ScheduledChunk], logits: np.ndarray) -> list[np.ndarray]:
    """The logits rows of each chunk that carries a draft (len(tokens) rows each), in chunk order."""
    blocks: list[np.ndarray] = []
    at = 0
    for chunk in chunks:
        rows = len(chunk.tokens) if chunk.all_logits else int(chunk.want_logits)
        if chunk.draft:
            blocks.append(logits[at:at + rows])
        at += rows
    return blocks
