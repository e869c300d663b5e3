"""Loading a swapped-out model's saved prefix-cache entries back into its new engine (edgeopt.server.models.swap_space):
only an index saved for this engine (its fingerprint), and of its entries only whole files whose tokens llama.cpp
reads back as saved; anything else is ignored with a warning naming the file, and dropped (removed by the caller).
Each entry's outcome is one of RESTORED, SKIPPED (no room, or longer than a request may be: its file stays) and
DROPPED."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from edgeopt.engine.api import ServingEngine
from edgeopt.errors import BackendError
from edgeopt.runtimes.base import Runtime
from edgeopt.server.models.swap_index import (INDEX, ModelIndex, SavedEntry, fingerprint_differences, read_index,
                                              remove_folder, state_problem)

log = logging.getLogger("edgeopt.server")
RESTORED, SKIPPED, DROPPED = "restored", "skipped", "dropped"


def matching_index(folder: Path, model_key: str, expected: dict[str, Any]) -> ModelIndex | None:
    """The folder's index when it is readable and saved for this engine; else warn, remove it, None."""
    try:
        index = read_index(folder)
    except (OSError, ValueError) as exc:
        log.warning("swap space: %s is unreadable (%s); its saved prefix cache is ignored and removed",
                    folder / INDEX, exc)
        remove_folder(folder)
        return None
    differences = fingerprint_differences(index.fingerprint | {"model_key": index.model_key},
                                          expected | {"model_key": model_key})
    if differences:
        log.warning("swap space: %s was saved for another model or server (%s); its saved prefix cache is "
                    "ignored and removed", folder / INDEX, "; ".join(differences))
        remove_folder(folder)
        return None
    return index


def restore_entries(folder: Path, index: ModelIndex, engine: ServingEngine, runtime: Runtime) -> dict[str, str]:
    """Each entry's outcome, by file name (a runtime failure skips the rest: their files stay)."""
    outcomes = {entry.file: SKIPPED for entry in index.entries}
    for entry in index.entries:
        try:
            outcomes[entry.file] = _restore_entry(folder, entry, engine, runtime)
        except BackendError:
            log.exception("swap space: restoring %s failed; the model goes on with what was restored",
                          folder / entry.file)
            break
    return outcomes


def _restore_entry(folder: Path, entry: SavedEntry, engine: ServingEngine, runtime: Runtime) -> str:
    path = folder / entry.file
    problem = state_problem(folder, entry)
    if problem is not None:
        log.warning("swap space: %s %s; ignored and removed", path, problem)
        return DROPPED
    if len(entry.tokens) >= engine.context_tokens:
        return SKIPPED  # longer than a request may be here: nothing could continue it
    refusals: list[str] = []

    def fill(seq_id: int) -> bool:
        loaded = runtime.load_sequence(seq_id, path, len(entry.tokens))
        if loaded != entry.tokens:
            refusals.append("llama.cpp refused it" if not loaded else
                            f"its {len(loaded)} tokens are not the {len(entry.tokens)} its index names")
        return not refusals

    restored = engine.restore_prefix(entry.tokens, fill, entry.namespace)
    if refusals:
        log.warning("swap space: %s: %s; ignored and removed", path, refusals[0])
        return DROPPED
    return RESTORED if restored else SKIPPED
