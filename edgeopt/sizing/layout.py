"""Which llama.cpp KV layout ``serve --kv-layout auto`` picks: arithmetic only, so ``edgeopt plan`` (before
anything is built) and ``edgeopt serve`` (before llama.cpp loads) give the same answer.

``streams`` gives every sequence id a stream of cells of its own (llama-server's layout), which llama.cpp
rounds up to STREAM_ALIGN cells; ``unified`` is one pool all sequences draw from. ``auto`` picks streams
when the memory budget holds a full ``context`` stream per sequence and, with the prefix cache on, as many
again for cached prefixes (a cached prefix is a stream of its own there); tighter budgets get unified, where
a sequence may use the cells the others leave and cached prefixes share cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt.errors import ConfigError

STREAM_ALIGN = 256  # llama-context.cpp pads a stream's cells (n_ctx_seq) up to a multiple of 256
UNIFIED = "unified"  # one pool of cells every sequence draws from (llama.cpp kv_unified = true)
STREAMS = "streams"  # a stream of cells per sequence id (kv_unified = false, llama-server's layout)
AUTO = "auto"  # serve --kv-layout auto: auto_kv_layout decides
KV_LAYOUTS = (UNIFIED, STREAMS)
KV_LAYOUT_CHOICES = (AUTO, *KV_LAYOUTS)
MAX_SEQUENCE_IDS = 256  # llama-cparams.h LLAMA_MAX_SEQ: the most sequence ids one llama.cpp context accepts
# Cached prefixes (leaves of the engine's prefix tree) kept at once, by default as many as running
# sequences and at least this many. In the unified layout an id costs one logits row of llama.cpp's output
# buffer, never KV (the cached cells live inside the pool); with streams each is a stream of its own.
MIN_CACHE_SLOTS = 8


def stream_cells(context: int) -> int:
    """The cells of a stream that holds ``context`` tokens."""
    return -(-context // STREAM_ALIGN) * STREAM_ALIGN


def auto_kv_layout(kv_fit_tokens: int, sequences: int, context: int, prefix_cache: bool) -> str:
    """``streams`` when ``kv_fit_tokens`` cells hold a ``context`` stream per sequence (and per cached prefix
    with ``prefix_cache``), else ``unified``."""
    streams = sequences * (2 if prefix_cache else 1)
    return STREAMS if stream_cells(context) * streams <= kv_fit_tokens else UNIFIED


def check_kv_layout_request(asked: str, runtime_layouts: tuple[str, ...], runtime: str) -> None:
    """Refuse, before anything is sized or loaded, a ``--kv-layout`` that is no layout, or ``streams`` for a
    runtime that has only its own (``runtime_layouts`` empty: ONNX Runtime, torch)."""
    if asked not in KV_LAYOUT_CHOICES:
        raise ConfigError(f"--kv-layout {asked!r} is not a KV layout", f"use one of {', '.join(KV_LAYOUT_CHOICES)}")
    if not runtime_layouts and asked == STREAMS:
        raise ConfigError(f"--kv-layout {STREAMS} applies to llama.cpp (GGUF) bundles; this one runs on {runtime}",
                          "leave --kv-layout out for this bundle")


def chosen_kv_layout(asked: str, runtime_layouts: tuple[str, ...], kv_fit_tokens: int, sequences: int, context: int,
                     prefix_cache: bool) -> str | None:
    """The layout a runtime with a choice (``runtime_layouts``) is given: the one asked for, or with ``auto``
    :func:`auto_kv_layout` (streams when memory holds them: measured on a ~200M Q8_0 model at 16 streams,
    streams cost 0.90x unified's CPU per decode step and 0.75x with 4 idle cached 1,000-token prefixes,
    tests/bench/bench_step_cost.py). None for a runtime that has only its own."""
    if not runtime_layouts:
        return None
    if asked != AUTO:
        return asked
    return auto_kv_layout(kv_fit_tokens, sequences, context, prefix_cache)


def default_cache_slots(max_slots: int) -> int:
    """Sequence ids kept for cached prefixes beside ``max_slots`` running sequences, within llama.cpp's ids."""
    return min(max(max_slots, MIN_CACHE_SLOTS), MAX_SEQUENCE_IDS - max_slots)


@dataclass(frozen=True)
class StreamLayout:
    stream_cells: int  # cells of each sequence id's stream (llama.cpp's n_ctx_seq)
    max_slots: int
    cache_slots: int  # streams for cached prefixes

    @property
    def total_cells(self) -> int:
        """llama.cpp's n_ctx: every stream's cells."""
        return self.stream_cells * (self.max_slots + self.cache_slots)


def stream_layout(memory_cells: int, max_slots: int, cache_slots: int, context: int) -> StreamLayout:
    """Per-sequence streams within ``memory_cells`` (what the memory budget holds): a ``context``-long
    stream per slot, then up to ``cache_slots`` more for cached prefixes. When the slots alone do not fit,
    each gets an equal share rounded down to STREAM_ALIGN (a shorter context) and the cache none."""
    wanted = stream_cells(context)
    if wanted * max_slots <= memory_cells:
        return StreamLayout(wanted, max_slots, min(cache_slots, memory_cells // wanted - max_slots))
    share = memory_cells // max_slots // STREAM_ALIGN * STREAM_ALIGN
    if share == 0:
        raise ConfigError(f"{memory_cells} KV cells cannot give {max_slots} sequences a stream of {STREAM_ALIGN} "
                          "cells each (--kv-layout streams)",
                          "use --kv-layout unified, fewer --max-concurrency, or more --memory")
    return StreamLayout(share, max_slots, 0)
