"""The serving shape: every number a causal LM is served with, decided once by :func:`decide_serving_shape`
and handed, frozen, to whoever needs it (``edgeopt serve`` gives it to the runtime and the engine,
``edgeopt plan`` prints it), so no caller works a layout, a KV type or a cell count out again.

    KV type   the one asked for (serve --kv-type), else the bundle's recorded one, else the format's default
    sizing    edgeopt.sizing.budget.size_kv on the memory pool: budget, sequences, context, cells that fit
    layout    llama.cpp only: the one asked for, or auto (edgeopt.sizing.layout.auto_kv_layout)
    cells     what the runtime allocates: the sized pool; with streams every cell memory holds, which the
              runtime splits into a stream per sequence and per cached prefix
    batch     tokens one runtime step carries: the batch the runtime-overhead estimate assumed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt.backends import Backend
from edgeopt.errors import ConfigError
from edgeopt.sizing.budget import KvFacts, KvSizing, MemoryPool, size_kv
from edgeopt.sizing.kv_types import kv_element_bytes_for, parse_kv_type
from edgeopt.sizing.layout import AUTO, STREAMS, check_kv_layout_request, chosen_kv_layout

DEFAULT_CONTEXT = 4096  # no --context: the model's own window, capped here


@dataclass(frozen=True)
class ShapeRequest:
    """What the operator asked for (``edgeopt serve``'s flags); None / AUTO: decide from memory."""

    context: int | None = None
    max_sequences: int | None = None
    kv_type: str | None = None
    kv_layout: str = AUTO
    prefix_cache: bool = True


@dataclass(frozen=True)
class ServingShape:
    sizing: KvSizing  # the memory arithmetic: budget, sequences, context, cells that fit
    kv_type: str | None  # None: the runtime keeps its one fixed dtype
    kv_layout: str | None  # unified / streams where the runtime has a choice (llama.cpp); None: its own
    kv_cells: int  # KV cells the runtime may allocate
    batch_tokens: int | None  # tokens per runtime step (llama.cpp n_batch = n_ubatch); None: the runtime's own
    prefix_cache: bool

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
        return options


def check_shape_request(entry: Backend, request: ShapeRequest) -> str | None:
    """Refuse what ``entry``'s runtime cannot do (``--kv-type`` or ``--kv-layout streams`` on a runtime with one
    fixed dtype or layout) before anything is read or loaded; returns the asked KV type in canonical spelling."""
    check_kv_layout_request(request.kv_layout, entry.kv_layouts, entry.runtime)
    return parse_kv_type(request.kv_type, entry.format) if request.kv_type is not None else None


def served_kv_type(entry: Backend, asked: str | None, recorded: str | None) -> str | None:
    """``asked`` (already checked), else the type the bundle recorded, else the format's default; None for a
    format whose runtime has no choice (ONNX, torch)."""
    if not entry.kv_cache_types:
        return None
    return asked or recorded or entry.kv_cache_types[0]


def refuse_context_past_window(request: ShapeRequest, model_window: int) -> None:
    """A server refuses an explicit ``--context`` longer than the model's window (a plan only reports it)."""
    if request.context is not None and request.context > model_window:
        raise ConfigError(f"--context {request.context} is longer than the model's training context "
                          f"({model_window} tokens)",
                          f"pass --context {model_window} or less, or leave --context out to use {model_window}")


def decide_serving_shape(entry: Backend, quant: str, facts: KvFacts, pool: MemoryPool, request: ShapeRequest,
                         recorded_kv_type: str | None = None) -> ServingShape:
    """The shape a ``entry``:``quant`` model with ``facts`` is served with in ``pool``. Never refuses for lack of
    room: ``edgeopt plan`` reports it, and a server calls :func:`edgeopt.sizing.budget.require_kv_room`."""
    kv_type = served_kv_type(entry, check_shape_request(entry, request), recorded_kv_type)
    sizing = size_kv(facts, pool, kv_element_bytes=kv_element_bytes_for(entry.format, quant, kv_type),
                     context=request.context or min(facts.context_length, DEFAULT_CONTEXT),
                     max_sequences=request.max_sequences)
    layout = chosen_kv_layout(request.kv_layout, entry.kv_layouts, sizing.kv_fit_tokens, sizing.max_sequences,
                              sizing.context_length, request.prefix_cache)
    cells = sizing.kv_fit_tokens if layout == STREAMS else sizing.kv_capacity_tokens
    return ServingShape(sizing=sizing, kv_type=kv_type, kv_layout=layout, kv_cells=cells,
                        batch_tokens=entry.batch_tokens or None, prefix_cache=request.prefix_cache)
