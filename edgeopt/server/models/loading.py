"""The catalog of a server of several models: an entry per bundle or GGUF file, with what it needs in bytes
and how it loads within the bytes it is given.

How the budget is shared (docs/many-models.md):

- The budget is ``--memory`` (else the target's usable memory) less the safety margin and the process's
  own share (Python, the server, the runtimes' libraries), which is counted once for every model.
- A causal LM asks for ``--max-concurrency`` sequences (default ``SEQUENCES``, not what the whole budget
  would afford: the budget is shared) of ``--context`` tokens, on llama.cpp's unified KV layout (cached
  prefixes keep the cells running sequences leave free; ``--prefix-cache-memory`` adds cells of their
  own). That is its full size. Loaded where less is free, it gets the KV the free bytes hold, never less than
  one full-context sequence (its least size); the engine queues what does not fit.
- An encoder (embeddings, rerank) needs its weights and runtime buffers: no KV.
- A model whose least size exceeds the whole budget is listed but refused, with its bytes and the budget.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from pathlib import Path

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.errors import ConfigError, EdgeoptError
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.sources.model_source import ModelSource, model_card, open_model_source
from edgeopt.planning import BundleSource, ServeRequest, is_bundle_dir, plan_for
from edgeopt.server.models.catalog import ModelEntry, ModelNeed
from edgeopt.server.models.compute_gate import ComputeGate
from edgeopt.server.served_model import ServedModel
from edgeopt.sizing.budget import MIB, SAFETY_MARGIN
from edgeopt.sizing.layout import AUTO, UNIFIED
from edgeopt.sizing.resident import ResidentMemory
from edgeopt.sizing.shape import ServingShape, ShapeRequest

log = logging.getLogger("edgeopt.server")
SEQUENCES = 4  # a model's concurrent sequences when --max-concurrency is not given

# (bundle dir, manifest, shape or None for an encoder, compute gate) -> the loaded model (edgeopt.server.startup.launcher)
LoadModel = Callable[[Path, Manifest, "ServingShape | None", ComputeGate], ServedModel]


@dataclasses.dataclass(frozen=True)
class SharedBudget:
    """What the loaded models' needs may sum to, and how each model's shape is asked for."""

    bytes: int  # after the safety margin and the process's share
    process_bytes: int  # the process's share, held back once
    request: ShapeRequest  # the operator's shape flags (shared_request adds this module's defaults)
    gate: ComputeGate
    verify: bool = True


def shared_request(request: ShapeRequest, fmt: str) -> ShapeRequest:
    """The operator's shape flags with the defaults of a shared budget: SEQUENCES sequences, and the unified KV
    layout where the runtime has a choice (streams would set a stream aside per cached prefix)."""
    layout = UNIFIED if request.kv_layout == AUTO and backends.backend(fmt).serving.kv_layouts else request.kv_layout
    return dataclasses.replace(request, max_sequences=request.max_sequences or SEQUENCES, kv_layout=layout)


def shared_budget(memory_bytes: int, request: ShapeRequest, formats: set[str], verify: bool = True) -> SharedBudget:
    process = max((backends.backend(fmt).memory.process_bytes for fmt in formats), default=0)
    room = memory_bytes - int(memory_bytes * SAFETY_MARGIN) - process
    if room <= 0:
        raise ConfigError(f"--memory {memory_bytes / MIB:.0f} MiB leaves nothing for models once the process's "
                          f"{process / MIB:.0f} MiB and the {SAFETY_MARGIN:.0%} margin are held back",
                          "give edgeopt serve a larger --memory")
    return SharedBudget(room, process, request, ComputeGate(), verify)


def model_files(folder: Path) -> list[Path]:
    """The bundles and GGUF files directly inside ``folder`` (edgeopt serve --models), by name."""
    return sorted(p for p in folder.iterdir() if is_bundle_dir(p) or (p.is_file() and is_gguf_file(p)))


def model_entry(path: Path, budget: SharedBudget, load: LoadModel, source: ModelSource | None = None) -> ModelEntry:
    """``path``'s catalog entry; ``source``: the model already opened from it (read once, not again)."""
    source = source or open_model_source(path, verify=budget.verify)
    bundle_dir, manifest = source.bundle_dir, source.manifest
    name, aliases = source.names[0], source.names[1:]
    card = model_card(bundle_dir, manifest)
    if manifest.kind in ("embedding", "rerank"):
        resident = plan_for(BundleSource(bundle_dir, manifest), "host", ServeRequest(refuse=False)).resident
        bytes_ = resident.total_bytes - resident.process_bytes
        need, labels = ModelNeed(bytes_, bytes_), {}

        def load_encoder(room: int) -> ServedModel:
            return load(bundle_dir, manifest, None, budget.gate)

        loader = load_encoder
    elif manifest.kind == "causal-lm":
        full, resident = _planned_in(bundle_dir, manifest, budget, budget.bytes)
        need = _need(full, resident)
        labels = {k: v for k, v in (("kv_type", full.kv_type), ("layout", full.kv_layout)) if v}

        def load_causal(room: int) -> ServedModel:
            shape, _ = _planned_in(bundle_dir, manifest, budget, room, refuse=True)
            return load(bundle_dir, manifest, shape, budget.gate)

        loader = load_causal
    else:
        raise ConfigError(f"{path}: bundle kind {manifest.kind!r} cannot be served",
                          "servable kinds: causal-lm, embedding, rerank")
    refusal = None
    if need.least_bytes > budget.bytes:
        refusal = (f"model {name!r} needs {need.least_bytes / MIB:.0f} MiB at least (weights, runtime and one "
                   f"full-context sequence); the budget for models is {budget.bytes / MIB:.0f} MiB")
    return ModelEntry(name=name, kind=manifest.kind, need=need, load=loader, aliases=aliases, card=card,
                      kv_labels=labels, path=path, bundle_dir=bundle_dir, manifest=manifest, refusal=refusal)


def scan_folder(folder: Path, budget: SharedBudget, load: LoadModel) -> Callable[[], list[ModelEntry]]:
    """``--models DIR``: an entry per bundle or GGUF file found, each time it is called; a file that cannot be
    read is left out with a warning (it may still be being copied in)."""
    known: dict[tuple[Path, float], ModelEntry] = {}

    def scan() -> list[ModelEntry]:
        entries = []
        for path in model_files(folder):
            stamp = (path, path.stat().st_mtime)
            if stamp not in known:
                try:
                    known[stamp] = model_entry(path, budget, load)
                except EdgeoptError as exc:
                    log.warning("--models %s: %s is left out: %s", folder, path.name, exc)
                    continue
            entries.append(known[stamp])
        return entries

    return scan


def _planned_in(bundle_dir: Path, manifest: Manifest, budget: SharedBudget, room: int,
                refuse: bool = False) -> tuple[ServingShape, ResidentMemory]:
    """The shape of a causal LM given ``room`` bytes of the budget, and what it holds resident: the planner's own
    decision in a pool that, less its margin, is ``room`` plus the process's share (counted once, by the budget)."""
    pool = math.ceil((room + budget.process_bytes) / (1 - SAFETY_MARGIN))
    planned = plan_for(BundleSource(bundle_dir, manifest), "host",
                       ServeRequest(shared_request(budget.request, manifest.format), pool, refuse=refuse))
    assert planned.shape is not None  # a causal LM has a KV cache
    return planned.shape, planned.resident


def _need(full: ServingShape, resident: ResidentMemory) -> ModelNeed:
    full_bytes = resident.total_bytes - resident.process_bytes
    beyond_one = max(0, resident.kv_live_cells - full.context_length) + resident.kv_prefix_cells
    return ModelNeed(full_bytes, full_bytes - beyond_one * resident.kv_bytes_per_token)
