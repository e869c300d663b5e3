"""The serving shape: every number a causal LM is served with, decided once by :func:`decide_serving_shape`
and handed, frozen, to whoever needs it (``edgeopt serve`` gives it to the runtime and the engine,
``edgeopt plan`` prints it), so no caller works a layout, a KV type or a cell count out again.

    KV type   the one asked for (serve --kv-type), else the bundle's recorded one, else the format's default
    sizing    edgeopt.sizing.budget.size_kv on the memory pool: budget, sequences, context, cells that fit
    layout    llama.cpp only: the one asked for, or auto (edgeopt.sizing.layout.auto_kv_layout)
    cells     what the runtime allocates, by purpose: unified, the sized pool for live sequences (cached
              prefixes share its cells; ``--prefix-cache-memory`` adds cells for them); streams, a stream
              per sequence and one per cached prefix, as many as memory (or ``--prefix-cache-memory``) holds
    batch     tokens one runtime step carries: the batch the runtime-overhead estimate assumed
    attention llama.cpp only: plain attention's score buffer, reserved where auto may take it (streams, f16
              KV: edgeopt.sizing.attention), and what the runtime is told to run
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from edgeopt.backends import Backend
from edgeopt.errors import ConfigError
from edgeopt.sizing.attention import AUTO as ATTENTION_AUTO
from edgeopt.sizing.attention import (
    OFF,
    check_flash_attention_request,
    check_plain_attention,
    plain_attention_buffer_bytes,
    plain_attention_possible,
    runtime_flash_attention,
)
from edgeopt.sizing.budget import KvFacts, KvSizing, MemoryPool, size_kv
from edgeopt.sizing.cells import cells_by_purpose
from edgeopt.sizing.kv_choice import kv_type_in_memory
from edgeopt.sizing.kv_types import parse_kv_type
from edgeopt.sizing.layout import AUTO, check_kv_layout_request, chosen_kv_layout

DEFAULT_CONTEXT = 4096  # no --context: the model's own window, capped here


@dataclass(frozen=True)
class ShapeRequest:
    """What the operator asked for (``edgeopt serve``'s flags); None / AUTO: decide from memory."""

    context: int | None = None
    max_sequences: int | None = None
    kv_type: str | None = None
    kv_layout: str = AUTO
    prefix_cache: bool = True
    # --prefix-cache-memory: bytes of KV for cached prefixes beyond the live sequences' cells; None: as much
    # as the layout's default takes (streams: a stream per cache id that memory holds; unified: none, prefixes
    # keep the cells the live sequences leave free)
    prefix_cache_bytes: int | None = None
    # Logits rows one speculative step may need beyond a row per sequence (the longest draft; 0: speculation
    # off). A runtime with a fixed output buffer (llama.cpp's n_outputs_max) reserves them, counted here.
    draft_rows: int = 0
    flash_attention: str = ATTENTION_AUTO  # --flash-attention (edgeopt.sizing.attention)
    # A plan's rule where no KV type is asked for or recorded: this type when the default's cache cannot hold
    # max_sequences x context tokens (the profile's tight_memory_kv_type; edgeopt.sizing.kv_choice). None: none.
    tight_kv_type: str | None = None


@dataclass(frozen=True)
class ServingShape:
    sizing: KvSizing  # the memory arithmetic: budget, sequences, context, cells that fit
    kv_type: str | None  # None: the runtime keeps its one fixed dtype
    kv_layout: str | None  # unified / streams where the runtime has a choice (llama.cpp); None: its own
    kv_cells: int  # KV cells the runtime allocates (kv_live_cells + kv_prefix_cells)
    batch_tokens: int | None  # tokens per runtime step (llama.cpp n_batch = n_ubatch); None: the runtime's own
    prefix_cache: bool
    kv_live_cells: int = 0  # of kv_cells, those for running sequences
    kv_prefix_cells: int = 0  # of kv_cells, those kept for cached prefixes only (0: they share the live cells)
    cache_slots: int | None = None  # sequence ids for cached prefixes (llama.cpp); None: the runtime's own
    draft_rows: int = 0  # logits rows reserved for speculative steps (ShapeRequest.draft_rows); 0: none needed
    # llama.cpp: what its runtime is told (edgeopt.sizing.attention.runtime_flash_attention); None: no choice
    flash_attention: str | None = None
    attention_buffer_bytes: int = 0  # of the runtime overhead, plain attention's scores (0: not reserved)

    @property
    def max_sequences(self) -> int:
        return self.sizing.max_sequences

    @property
    def context_length(self) -> int:
        return self.sizing.context_length

    def runtime_options(self) -> dict[str, Any]:
        """The sizes ``edgeopt.runtimes.load_runtime`` is given; options a runtime has no choice in are left out."""
        options: dict[str, Any] = {"kv_capacity_tokens": self.kv_cells, "max_slots": self.max_sequences,
                                   "context_length": self.context_length}
        if self.kv_type is not None:
            options["kv_type"] = self.kv_type
        if self.kv_layout is not None:
            options["kv_layout"] = self.kv_layout
        if self.batch_tokens is not None:
            options["max_batch_tokens"] = self.batch_tokens
        if not self.prefix_cache:
            options["cache_slots"] = 0
        elif self.cache_slots is not None:
            options["cache_slots"] = self.cache_slots
        if self.draft_rows:
            options["draft_rows"] = self.draft_rows
        if self.flash_attention is not None:
            options["flash_attention"] = self.flash_attention
        return options


def check_shape_request(entry: Backend, request: ShapeRequest) -> str | None:
    """Refuse what ``entry``'s runtime cannot do (``--kv-type`` or ``--kv-layout streams`` on a runtime with one
    fixed dtype or layout) before anything is read or loaded; returns the asked KV type in canonical spelling."""
    check_kv_layout_request(request.kv_layout, entry.serving.kv_layouts, entry.runtime)
    check_flash_attention_request(request.flash_attention, entry.serving.kv_layouts, entry.runtime)
    return parse_kv_type(request.kv_type, entry.format) if request.kv_type is not None else None


def served_kv_type(entry: Backend, asked: str | None, recorded: str | None) -> str | None:
    """``asked`` (already checked), else the type the bundle recorded, else the format's default; None for a
    format whose runtime has no choice (ONNX, torch)."""
    if not entry.serving.kv_cache_types:
        return None
    return asked or recorded or entry.serving.kv_cache_types[0]


def refuse_context_past_window(request: ShapeRequest, model_window: int) -> None:
    """A server refuses an explicit ``--context`` longer than the model's window (a plan only reports it)."""
    if request.context is not None and request.context > model_window:
        raise ConfigError(f"--context {request.context} is longer than the model's training context "
                          f"({model_window} tokens)",
                          f"pass --context {model_window} or less, or leave --context out to use {model_window}")


def with_draft_rows(entry: Backend, facts: KvFacts, draft_rows: int) -> KvFacts:
    """``facts`` whose runtime overhead counts ``draft_rows`` logits rows beyond a row per sequence: in llama.cpp's
    output buffer and in its graph's logits, two float32 vocabulary rows each (none for other runtimes)."""
    if not draft_rows or not entry.memory.logits_rows_per_sequence:
        return facts
    row_bytes = facts.runtime_bytes_per_sequence // entry.memory.logits_rows_per_sequence
    return replace(facts, runtime_overhead_bytes=facts.runtime_overhead_bytes + 2 * draft_rows * row_bytes)


def decide_serving_shape(entry: Backend, quant: str, facts: KvFacts, pool: MemoryPool, request: ShapeRequest,
                         recorded_kv_type: str | None = None) -> ServingShape:
    """The shape a ``entry``:``quant`` model with ``facts`` is served with in ``pool``. Never refuses for lack of
    room: ``edgeopt plan`` reports it, and a server calls :func:`edgeopt.sizing.budget.require_kv_room`.

    Each piece is decided once, in order: the KV type and its element size, the sizing and the layout, plain
    attention's buffer (sized again with it when that keeps the layout), the cells by purpose."""
    asked = check_shape_request(entry, request)
    context = request.context or min(facts.context_length, DEFAULT_CONTEXT)
    draft_rows = request.draft_rows if entry.memory.logits_rows_per_sequence else 0
    drafted = with_draft_rows(entry, facts, draft_rows)
    tight = request.tight_kv_type if asked is None and recorded_kv_type is None else None
    kv_type, element_bytes = kv_type_in_memory(entry, quant, served_kv_type(entry, asked, recorded_kv_type), tight,
                                               facts, pool, context, request.max_sequences)
    sizing = size_kv(drafted, pool, kv_element_bytes=element_bytes, context=context,
                     max_sequences=request.max_sequences)
    layout = chosen_kv_layout(request.kv_layout, entry.serving.kv_layouts, sizing.kv_fit_tokens, sizing.max_sequences,
                              sizing.context_length, request.prefix_cache)
    attention_bytes = 0
    serving = entry.serving
    if serving.kv_layouts and plain_attention_possible(request.flash_attention, kv_type, layout) and facts.attention_heads:
        # Plain attention's score buffer is memory the runtime may take: sized with it, unless that costs the
        # streams layout (auto then keeps flash attention and the shape without it).
        attention_bytes = plain_attention_buffer_bytes(serving.batch_tokens, sizing.context_length, facts.attention_heads)
        reserved = replace(drafted, runtime_overhead_bytes=drafted.runtime_overhead_bytes + attention_bytes)
        with_buffer = size_kv(reserved, pool, kv_element_bytes=element_bytes, context=context,
                              max_sequences=request.max_sequences)
        layout_with_buffer = chosen_kv_layout(request.kv_layout, entry.serving.kv_layouts, with_buffer.kv_fit_tokens,
                                              with_buffer.max_sequences, with_buffer.context_length,
                                              request.prefix_cache)
        if layout_with_buffer == layout or request.flash_attention == OFF:
            sizing, layout = with_buffer, layout_with_buffer
        else:
            attention_bytes = 0
    if entry.serving.kv_layouts:
        check_plain_attention(request.flash_attention, kv_type, layout)
    live, prefix, cache_slots = cells_by_purpose(layout, sizing, request.prefix_cache, request.prefix_cache_bytes)
    return ServingShape(sizing=sizing, kv_type=kv_type, kv_layout=layout, kv_cells=live + prefix,
                        batch_tokens=entry.serving.batch_tokens or None, prefix_cache=request.prefix_cache,
                        kv_live_cells=live, kv_prefix_cells=prefix, cache_slots=cache_slots, draft_rows=draft_rows,
                        flash_attention=(runtime_flash_attention(request.flash_attention, attention_bytes > 0)
                                         if entry.serving.kv_layouts else None),
                        attention_buffer_bytes=attention_bytes)
