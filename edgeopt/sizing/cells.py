"""A serving shape's KV cells by purpose: those of the running sequences and those kept for cached prefixes only,
as the layout lays them out (streams: a stream per sequence and per cached prefix; unified: one pool)."""

from __future__ import annotations

from edgeopt.sizing.budget import KvSizing
from edgeopt.sizing.layout import STREAM_ALIGN, STREAMS, default_cache_slots, stream_cells, stream_layout


def cells_by_purpose(layout: str | None, sizing: KvSizing, prefix_cache: bool,
                     prefix_cache_bytes: int | None) -> tuple[int, int, int | None]:
    """(cells for running sequences, cells kept for cached prefixes only, cache sequence ids or None).

    Streams: a stream per running sequence, then a stream per cache id while memory holds one (as many
    as ``prefix_cache_bytes`` pays for when given). Unified and runtimes with one layout: the sized
    pool is the live sequences'; cached prefixes keep cells they leave free, plus the cells
    ``prefix_cache_bytes`` pays for (within what memory holds)."""
    wanted_cache = default_cache_slots(sizing.max_sequences) if prefix_cache and layout else 0
    per_token = sizing.kv_bytes_per_token
    if layout == STREAMS and sizing.kv_fit_tokens < STREAM_ALIGN * sizing.max_sequences:
        # Not a stream each: nothing to split (a plan reports "fits: no"; the runtime refuses the layout).
        return sizing.kv_fit_tokens, 0, 0
    if layout == STREAMS:
        if prefix_cache_bytes is not None and per_token:
            stream_bytes = stream_cells(sizing.context_length) * per_token
            wanted_cache = min(wanted_cache, prefix_cache_bytes // stream_bytes)
        streams = stream_layout(sizing.kv_fit_tokens, sizing.max_sequences, wanted_cache, sizing.context_length)
        return (streams.stream_cells * sizing.max_sequences, streams.stream_cells * streams.cache_slots,
                streams.cache_slots)
    live = sizing.kv_capacity_tokens
    extra = 0
    if prefix_cache and prefix_cache_bytes and per_token:
        extra = min(prefix_cache_bytes // per_token, max(sizing.kv_fit_tokens - live, 0))
    return live, extra, (wanted_cache if layout else None)
