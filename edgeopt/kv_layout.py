"""Which llama.cpp KV layout ``serve --kv-layout auto`` picks: arithmetic only, so ``edgeopt plan`` (before
anything is built) and ``edgeopt serve`` (before llama.cpp loads) give the same answer.

``streams`` gives every sequence id a stream of cells of its own (llama-server's layout), which llama.cpp
rounds up to STREAM_ALIGN cells; ``unified`` is one pool all sequences draw from. ``auto`` picks streams
when the memory budget holds a full ``context`` stream per sequence and, with the prefix cache on, as many
again for cached prefixes (a cached prefix is a stream of its own there); tighter budgets get unified, where
a sequence may use the cells the others leave and cached prefixes share cells.
"""

from __future__ import annotations

STREAM_ALIGN = 256  # llama-context.cpp pads a stream's cells (n_ctx_seq) up to a multiple of 256


def stream_cells(context: int) -> int:
    """The cells of a stream that holds ``context`` tokens."""
    return -(-context // STREAM_ALIGN) * STREAM_ALIGN


def auto_kv_layout(kv_fit_tokens: int, sequences: int, context: int, prefix_cache: bool) -> str:
    """``streams`` when ``kv_fit_tokens`` cells hold a ``context`` stream per sequence (and per cached prefix
    with ``prefix_cache``), else ``unified``."""
    streams = sequences * (2 if prefix_cache else 1)
    return "streams" if stream_cells(context) * streams <= kv_fit_tokens else "unified"
