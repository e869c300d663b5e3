"""``edgeopt serve A B C`` / ``edgeopt serve --models DIR``: several models in one server, on one budget.

Each bundle or GGUF file becomes a catalog entry (edgeopt.server.models.loading: its bytes, how it loads);
the residency (edgeopt.server.models.residency) loads a model when a request names it and unloads idle ones
to make room or after their keep-alive. Nothing loads at start but the ``--pin``ned models; every model's
bytes, and any that can never fit, are logged first.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.store.bundle import Manifest
from edgeopt.store.cache import cache_root
from edgeopt.errors import ConfigError
from edgeopt.sources.model_source import open_model_source
from edgeopt.profiles import load_profile
from edgeopt.server.startup.launcher import ServeOptions, load_served_model, server_keys, uvicorn_config
from edgeopt.server.models.catalog import ModelCatalog, ModelEntry
from edgeopt.server.models.compute_gate import ComputeGate
from edgeopt.server.models.keep_alive import describe
from edgeopt.server.models.loading import SharedBudget, model_entry, model_files, scan_folder, shared_budget
from edgeopt.server.models.metrics import ModelCounts, ModelMetrics
from edgeopt.server.models.residency import ModelEvents, Resident, Residency
from edgeopt.server.models.swap_space import SwapSpace
from edgeopt.server.served_model import ServedModel
from edgeopt.server.state import ServerSettings
from edgeopt.sizing.budget import MIB
from edgeopt.sizing.shape import ServingShape

log = logging.getLogger("edgeopt.server")


def serve_models(paths: list[Path], models_dir: Path | None, options: ServeOptions) -> None:
    """Serve every model in ``paths`` and ``models_dir`` until interrupted."""
    import uvicorn

    from edgeopt.server.app import create_app
    from edgeopt.server.startup.heap_tuning import keep_freed_heap

    check_several(options)
    api_key, admin_key = server_keys(options)
    counts = ModelCounts()
    residency, budget = build_residency(paths, models_dir, options, counts)
    settings = ServerSettings(api_key=api_key, api_keys=dict(options.api_keys), admin_key=admin_key,
                              memory_budget_bytes=budget.bytes + budget.process_bytes,
                              parse_special_in_content=options.parse_special_in_content,
                              responses_store_bytes=options.responses_store_bytes)
    keep_freed_heap()  # before the first step allocates
    app = create_app(settings, residency=residency)
    app.state.server.metrics.add_collector(ModelMetrics(residency, counts))
    uvicorn.Server(uvicorn_config(app, options)).run()


def check_several(options: ServeOptions) -> None:
    """Refuse the flags that describe one model's setup (--workers: edgeopt.cli.commands.serve_cmd, before the
    supervisor starts)."""
    if options.warm_file is not None:
        raise ConfigError("--warm stores one model's system prompt beside the file; several models were given",
                          "leave --warm out: each model's prefix cache is kept across swaps (--swap-space)")


def build_residency(paths: list[Path], models_dir: Path | None, options: ServeOptions,
                    counts: ModelCounts) -> tuple[Residency, SharedBudget]:
    memory = options.memory_bytes or load_profile(options.target).usable_memory_bytes
    sources = [open_model_source(p, verify=options.verify) for p in paths]  # each read (and checked) once
    formats = {source.manifest.format for source in sources}
    formats |= {open_model_source(p, verify=False).manifest.format for p in (model_files(models_dir) if models_dir
                                                                             else [])}
    budget = shared_budget(memory, options.shape_request(), formats or {"gguf"}, options.verify)
    kept = kept_models() if "gguf" in formats or models_dir is not None else None

    def load(bundle_dir: Path, manifest: Manifest, shape: ServingShape | None, gate: ComputeGate) -> ServedModel:
        return load_served_model(bundle_dir, manifest, shape, options, gate=gate, kept=kept)

    catalog = ModelCatalog([model_entry(p, budget, load, source) for p, source in zip(paths, sources)],
                           scan=scan_folder(models_dir, budget, load) if models_dir else None)
    log_catalog(catalog.entries(), budget, options)
    unknown = [name for name in options.pins if not any(name in e.names for e in catalog.entries())]
    if unknown:
        raise ConfigError(f"--pin {', '.join(unknown)}: no such model",
                          f"pin one of: {', '.join(e.name for e in catalog.entries())}")
    pins = frozenset(catalog.resolve(name).name for name in options.pins)
    events = swap_events(options, counts)
    return Residency(catalog, budget.bytes, options.keep_alive_s, pins, events, kept), budget


def kept_models() -> Any:
    """Where unloaded GGUF models stay loaded for a swap back, within the budget (runtimes/llama_cpp/kept_models.py)."""
    from edgeopt.runtimes.llama_cpp.kept_models import KeptModels

    return KeptModels()


def swap_events(options: ServeOptions, counts: ModelCounts) -> ModelEvents:
    """Count loads and unloads; with --swap-space, save an unloaded model's prefix cache and restore it at its
    next load (edgeopt.server.models.swap_space)."""
    if not options.swap_space_bytes:
        return ModelEvents(counted=counts.add)
    swap = SwapSpace(cache_root() / f"swap-{options.port}", options.swap_space_bytes)

    def state_of(resident: Resident) -> tuple[Any, Any, dict[str, Any]] | None:
        served, entry = resident.served, resident.entry
        if served.engine is None or served.runtime is None or entry.manifest is None or entry.bundle_dir is None:
            return None  # encoders keep no prefix cache
        return served.engine, served.runtime, swap.fingerprint(entry.bundle_dir, entry.manifest, served.runtime)

    def save(resident: Resident) -> None:
        state = state_of(resident)
        if state is not None:
            swap.save(resident.name, *state)

    def restore(resident: Resident) -> None:
        state = state_of(resident)
        if state is not None and swap.restore(resident.name, *state):
            counts.add(resident.name, "cache_restores")

    return ModelEvents(on_load=restore, on_unload=save, counted=counts.add)


def log_catalog(entries: list[ModelEntry], budget: SharedBudget, options: ServeOptions) -> None:
    log.info("%d models on a budget of %.0f MiB for models (+%.0f MiB for the process); idle models unload after "
             "%s", len(entries), budget.bytes / MIB, budget.process_bytes / MIB, describe(options.keep_alive_s))
    for entry in entries:
        if entry.refusal:
            log.warning("%s: refused: %s", entry.name, entry.refusal)
        else:
            log.info("%s (%s, %s): %.0f MiB, at least %.0f MiB", entry.name, entry.kind,
                     backends.backend(entry.card.get("format", "gguf")).runtime, entry.need.full_bytes / MIB,
                     entry.need.least_bytes / MIB)
