"""Which decode chunks of a scheduled step carry drafted tokens: the last part of the scheduler's decision.

Drafts ride in what is left of the step once decode tokens, prefill chunks and admissions are placed: the
leftover token budget, the KV cells free now (a draft never evicts a cached prefix or preempts a sequence),
the logits rows one pass can return, and the context (no drafted token at its last position or past it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeopt.engine.scheduled import ScheduledChunk, SchedulerOutput
from edgeopt.engine.sequence import Sequence

if TYPE_CHECKING:
    from edgeopt.engine.speculation.setup import Speculation


def attach_drafts(spec: Speculation, out: SchedulerOutput, budget: int, free_cells: int,
                  allocate: Callable[[Sequence, int], None]) -> None:
    """Extend ``out``'s decode chunks with the drafts the controller proposes within ``budget`` tokens and
    ``free_cells``; ``allocate(seq, n)`` takes the cells of a sequence's ``n`` drafted tokens."""
    for chunk in out.chunks:
        if len(chunk.seq.output_ids) >= chunk.seq.draft_wake_at:
            break
    else:
        return  # every sequence sleeps: SpeculationController.asleep's test, inline (it runs every step)
    decoding = [i for i, c in enumerate(out.chunks) if len(c.tokens) == 1 and c.want_logits and not c.all_logits]
    seqs = [out.chunks[i].seq for i in decoding]
    other_tokens = out.num_tokens - len(decoding)
    rows = sum(len(c.tokens) if c.all_logits else int(c.want_logits) for c in out.chunks)
    row_room = spec.max_rows - rows if spec.max_rows is not None else budget
    drafts = spec.controller.propose(seqs, other_tokens, min(budget, free_cells), row_room, spec.splits_mixed_lengths)
    for i, seq, draft in zip(decoding, seqs, drafts):
        draft = draft[:max(0, spec.context_tokens - seq.num_tokens)]
        if not draft:
            continue
        chunk = out.chunks[i]
        allocate(seq, len(draft))
        out.chunks[i] = ScheduledChunk(seq, chunk.tokens + draft, chunk.start_pos, want_logits=True,
                                       all_logits=True, draft=tuple(draft))
