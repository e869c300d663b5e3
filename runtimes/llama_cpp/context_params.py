"""The llama.cpp context a runtime decodes in: its parameters, chosen so that each engine step is one physical pass
and no memory is reserved that the engine will never use (runtimes/llama_cpp/context.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llama_cpp

from edgeopt.errors import FEWER_KV_CELLS_HINT, BackendError
from edgeopt.sizing.attention import OFF, ON
from edgeopt.runtimes.llama_cpp.attention import LLAMA_FLASH_TYPES
from edgeopt.runtimes.llama_cpp.kv_type import configure_kv_cache


@dataclass(frozen=True)
class ContextShape:
    kv_cells: int  # n_ctx: the engine's KV capacity
    max_slots: int  # running sequences
    cache_slots: int  # sequence ids of cached prefixes (never decoded)
    max_outputs: int  # logits rows one decode may return (n_outputs_max)
    max_batch: int  # tokens one decode carries (n_batch = n_ubatch)
    kv_unified: bool  # one shared pool of cells, or a stream per sequence id


def create_context(model: llama_cpp.llama_model_p, shape: ContextShape, n_threads: int, kv_type: str,
                   flash_attention: bool | None, eval_callback: Any = None) -> llama_cpp.llama_context_p:
    """``flash_attention``: flash (True) or plain (False) attention, None: llama.cpp's choice. ``eval_callback``:
    the scheduler's ``cb_eval`` (a ggml_backend_sched_eval_callback), None for none."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = shape.kv_cells
    params.n_batch = shape.max_batch
    params.n_ubatch = shape.max_batch  # one physical pass per step: the whole batch shares the weight reads
    params.n_seq_max = shape.max_slots + shape.cache_slots  # cache entries are sequences that are never decoded
    # At most one logits row per sequence per step: without this llama.cpp reserves n_batch rows
    # (512 x a 150k vocabulary x 4 bytes = 300 MB on a device that has none to spare).
    # llama.cpp reserves at least n_seq_max rows, so each cache sequence id costs one row (vocab x 4 bytes).
    # Prompt logprobs (all_logits) are decoded in pieces of at most that many rows (split_by_outputs).
    params.n_outputs_max = shape.max_outputs
    # unified: one shared pool of n_ctx cells; streams: n_ctx / n_seq_max cells per sequence id
    params.kv_unified = shape.kv_unified
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    params.no_perf = True
    configure_kv_cache(params, kv_type)
    if eval_callback is not None:
        params.cb_eval = eval_callback
        params.cb_eval_user_data = None
    if flash_attention is not None:
        params.flash_attn_type = LLAMA_FLASH_TYPES[ON if flash_attention else OFF]
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise BackendError(f"llama.cpp could not create a context with n_ctx={shape.kv_cells}, "
                           f"n_seq_max={shape.max_slots + shape.cache_slots} ({shape.max_slots} slots + "
                           f"{shape.cache_slots} cached-prefix ids), KV cache type {kv_type}", FEWER_KV_CELLS_HINT)
    return ctx
