"""Which llama.cpp KV layout ``serve --kv-layout auto`` picks: arithmetic only, so ``edgeopt plan`` (before
anything is built) and ``edgeopt serve`` (before llama.cpp loads) give the same answer.

``streams`` gives every sequence id a stream of cells of its own (llama-server's layout), which llama.cpp
rounds up to STREAM_ALIGN cells; ``unified`` is one pool all sequences draw from. ``auto`` picks streams
when the memory budget holds a full ``context`` stream per sequence and, with the prefix cache on, as many
again for cached prefixes (a cached prefix is a stream of its own there); tighter budgets get unified, where
a sequence may use the cells the others leave and cached prefixes share cells.
"""

from __future__ import annotations

from edgeopt.errors import ConfigError

STREAM_ALIGN = 256  # llama-context.cpp pads a stream's cells (n_ctx_seq) up to a multiple of 256
UNIFIED = "unified"  # one pool of cells every sequence draws from (llama.cpp kv_unified = true)
STREAMS = "streams"  # a stream of cells per sequence id (kv_unified = false, llama-server's layout)
AUTO = "auto"  # serve --kv-layout auto: auto_kv_layout decides
KV_LAYOUTS = (UNIFIED, STREAMS)
KV_LAYOUT_CHOICES = (AUTO, *KV_LAYOUTS)


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
