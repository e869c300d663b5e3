"""Prefix caches that survive a swap: when a model is unloaded, its prefix cache's entries go to disk, and
when it loads again they come back into its new engine, so the next turn of a conversation whose model was
swapped out reads its prefix from the cache instead of computing it again.

Saved: every entry of the engine's prefix cache (its tokens and llama.cpp's sequence state), most recently
used first, under ``<directory>/<model key>/`` (the layout: :mod:`edgeopt.server.models.swap_index`). The
states of all models together stay within ``capacity_bytes``: a save makes room by removing the least
recently saved model's least recently used entries first, and an entry that does not fit even so is not
kept. A save replaces the model's previous one (the live cache is newer); a state is written to a partial
file and renamed when whole, and the index is written last.

Loaded (:mod:`edgeopt.server.models.swap_restore`): only states whose fingerprint (model file sha256, KV element type, KV streams, llama.cpp) is the new
engine's, whose file is whole (its size and sha256 as saved) and whose tokens llama.cpp reads back as saved;
anything else is ignored with a warning naming the file, and removed. Entries the new engine has no room for
are skipped and stay on disk. Restoring leaves the files in place: they stay valid for that model file (a
restarted server restores them too) until the model's next save replaces them.

Both run while the model's engine is running and idle (the residency manager unloads only idle models and
restores before the first request). One server per directory: two would evict each other's files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.store.bundle import Manifest, sha256_file
from edgeopt.engine.api import CachedPrefix, ServingEngine
from edgeopt.errors import ENGINE_BUG_HINT, BackendError, ConfigError
from edgeopt.store.file_stamp import file_stamp
from edgeopt.sources.model_source import open_model_source
from edgeopt.runtimes.base import Runtime
from edgeopt.server.models.swap_index import (INDEX, PARTIAL_SUFFIX, STATE_SUFFIX, ModelIndex, SavedEntry,
                                              folder_bytes, folder_name, read_index, remove_folder, remove_strays,
                                              write_index)
from edgeopt.server.models.swap_restore import DROPPED, RESTORED, matching_index, restore_entries
from edgeopt.server.startup.prompt_state import fingerprint as prompt_state_fingerprint

log = logging.getLogger("edgeopt.server")
MARKER = ".edgeopt-swap-space"  # a directory without it (and not empty) is not taken over


@dataclass(frozen=True)
class SwapRecord:
    """What one save did."""

    model_key: str
    entries: int  # cache entries written
    tokens: int  # their tokens, together
    bytes: int  # their state files, together
    skipped: int  # entries not kept: no room within capacity_bytes (or the runtime could not write them)
    evicted: int  # entries of other models removed to make room
    seconds: float


class SwapSpace:
    def __init__(self, directory: Path, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ConfigError(f"--swap-space {capacity_bytes} bytes is negative",
                              "pass a size such as 2GiB, or 0 to keep no prefix cache across a swap")
        self.directory = Path(directory)
        self.capacity_bytes = capacity_bytes
        _claim(self.directory)
        self._lock = threading.Lock()  # saves and restores of different models may run on different threads
        self._told_no_state: set[str] = set()
        self._hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256
        self._tidy()

    def used_bytes(self) -> int:
        """Bytes of every model's committed files (states and indexes)."""
        return sum(folder_bytes(folder) for folder in self._folders())

    def fingerprint(self, model_dir: Path, manifest: Manifest, runtime: Runtime) -> dict[str, Any]:
        """What a saved state must match to be loaded: ``--warm``'s fingerprint (model file and its sha256, KV
        type, llama-cpp-python), the sha256 of a GGUF served where it lies included (its manifest records none:
        hashed here, once per file and stat), and the KV streams llama.cpp's state file records."""
        found = prompt_state_fingerprint(manifest, runtime)
        if found.get("model_sha256") is None:
            found["model_sha256"] = self._file_sha256(Path(model_dir) / manifest.model_file)
        info = runtime.info
        # A sequence state records the cache's stream count and loads only into a cache with as many: one when
        # cells are shared (llama.cpp's unified cache), one per sequence id otherwise (per-sequence streams).
        found["kv_streams"] = 1 if info.shares_kv_cells else info.max_slots + info.cache_slots
        return found

    def fingerprint_of(self, model_path: Path, runtime: Runtime) -> dict[str, Any]:
        """:meth:`fingerprint` of the bundle directory or GGUF file ``model_path`` (its manifest read, not verified)."""
        source = open_model_source(model_path, verify=False)
        return self.fingerprint(source.bundle_dir, source.manifest, runtime)

    # --- unloading -----------------------------------------------------------------------------------------

    def save(self, model_key: str, engine: ServingEngine, runtime: Runtime, fingerprint: dict[str, Any]) -> SwapRecord:
        """Write every entry of the idle ``engine``'s prefix cache to disk, most recently used first, within the
        capacity (making room by removing the least recently saved entries of other models)."""
        started = time.perf_counter()
        if not self._keeps_state(model_key, runtime):
            return SwapRecord(model_key, 0, 0, 0, 0, 0, 0.0)
        _require_identity(fingerprint)
        folder = self.directory / folder_name(model_key)
        stamp, saved, skipped, evicted, kept = time.time_ns(), [], 0, 0, []
        with self._lock:
            try:
                remove_folder(folder)  # the live cache supersedes the last save
                folder.mkdir(parents=True)
                for number, prefix in enumerate(engine.cached_prefixes()):
                    entry, freed = self._save_entry(folder, f"{stamp}-{number}{STATE_SUFFIX}", prefix, engine, runtime)
                    saved += [entry] if entry is not None else []
                    skipped += entry is None
                    evicted += freed
                kept = self._write_within_capacity(folder, ModelIndex(model_key, time.time(), fingerprint, saved))
            except OSError as exc:  # a full or failing disk must not stop the unload
                log.warning("swap space: saving the prefix cache of %s to %s failed (%s); it is not kept",
                            model_key, folder, exc)
                remove_folder(folder)
        skipped += len(saved) - len(kept)
        record = SwapRecord(model_key, len(kept), sum(len(e.tokens) for e in kept), sum(e.bytes for e in kept),
                            skipped, evicted, time.perf_counter() - started)
        log.info("swap space: %d prefix-cache entries of %s saved (%d tokens, %.1f MiB) in %.2f s; %d not kept, "
                 "%d of other models removed for room", record.entries, model_key, record.tokens,
                 record.bytes / (1 << 20), record.seconds, record.skipped, record.evicted)
        return record

    def _save_entry(self, folder: Path, name: str, prefix: CachedPrefix, engine: ServingEngine,
                    runtime: Runtime) -> tuple[SavedEntry | None, int]:
        """Write one entry's state and commit it if room can be made; returns it (None: not kept) and the
        entries of other models removed for it."""
        partial, tokens = folder / (name + PARTIAL_SUFFIX), prefix.tokens
        try:
            written = engine.with_cached_prefix(tokens, lambda seq_id: runtime.save_sequence(seq_id, partial, tokens),
                                                prefix.namespace)
        except (BackendError, OSError) as exc:
            log.warning("swap space: a prefix-cache entry of %d tokens could not be saved to %s: %s",
                        len(tokens), partial, exc)
            partial.unlink(missing_ok=True)
            return None, 0
        if written is None:  # no longer in the cache (the engine was not idle)
            return None, 0
        size = partial.stat().st_size
        entry = SavedEntry(name, list(tokens), size, sha256_file(partial), prefix.namespace)
        freed = self._make_room(size + _index_bytes(entry), own=folder)
        if freed is None:
            partial.unlink()
            return None, 0
        os.replace(partial, folder / name)
        return entry, freed

    def _make_room(self, needed: int, own: Path) -> int | None:
        """Remove other models' entries, least recently saved model and least recently used entry first, until
        ``needed`` more bytes fit; the entries removed, or None when they cannot fit."""
        if folder_bytes(own) + needed > self.capacity_bytes:
            return None
        removed = 0
        while self.used_bytes() + needed > self.capacity_bytes:
            oldest = min(((f, i) for f, i in self._indexes() if f != own), key=lambda pair: pair[1].saved_at,
                         default=None)
            if oldest is None:
                return None
            folder, index = oldest
            last = index.entries[-1]
            write_index(folder, index.without({last.file}))  # first: an index never names a missing file
            (folder / last.file).unlink(missing_ok=True)
            removed += 1
        return removed

    def _write_within_capacity(self, folder: Path, index: ModelIndex) -> list[SavedEntry]:
        """Write the index; drop the model's own least recently used entries while the index's exact size
        puts the space over capacity (the room made counted it from an estimate)."""
        while True:
            write_index(folder, index)
            if not index.entries or self.used_bytes() <= self.capacity_bytes:
                return index.entries
            last = index.entries[-1]
            index = index.without({last.file})
            (folder / last.file).unlink(missing_ok=True)

    # --- loading -------------------------------------------------------------------------------------------

    def restore(self, model_key: str, engine: ServingEngine, runtime: Runtime, fingerprint: dict[str, Any]) -> int:
        """Load the model's saved entries into its freshly loaded ``engine``'s prefix cache, most recently used
        first, as far as they fit; returns the entries restored."""
        started = time.perf_counter()
        if not self._keeps_state(model_key, runtime):
            return 0
        _require_identity(fingerprint)
        with self._lock:
            folder = self.directory / folder_name(model_key)
            index = matching_index(folder, model_key, fingerprint) if (folder / INDEX).is_file() else None
            if index is None:
                return 0
            outcomes = restore_entries(folder, index, engine, runtime)
            dropped = {name for name, outcome in outcomes.items() if outcome == DROPPED}
            try:
                if dropped:
                    write_index(folder, index.without(dropped))  # removes the folder when nothing is left
                    if folder.is_dir():
                        remove_strays(folder, keep=set(outcomes) - dropped)
            except OSError as exc:
                log.warning("swap space: removing the refused states of %s from %s failed (%s)", model_key, folder, exc)
        restored = [entry for entry in index.entries if outcomes[entry.file] == RESTORED]
        log.info("swap space: %d of %d saved prefix-cache entries of %s restored (%d tokens) in %.2f s",
                 len(restored), len(index.entries), model_key, sum(len(e.tokens) for e in restored),
                 time.perf_counter() - started)
        return len(restored)

    # --- the directory ---------------------------------------------------------------------------------------

    def _folders(self) -> list[Path]:
        return [path for path in self.directory.iterdir() if path.is_dir()]

    def _indexes(self) -> list[tuple[Path, ModelIndex]]:
        """Every readable index with entries (another thread's save in progress has none yet: it holds the lock)."""
        found = []
        for folder in self._folders():
            try:
                found.append((folder, read_index(folder)))
            except (OSError, ValueError):
                continue  # _tidy removed those at start; a later one is found by its restore
        return [(folder, index) for folder, index in found if index.entries]

    def _tidy(self) -> None:
        """At start: remove what an interrupted save left (files no index names, folders without an index)."""
        for folder in self._folders():
            try:
                remove_strays(folder, keep={entry.file for entry in read_index(folder).entries})
            except (OSError, ValueError) as exc:
                if (folder / INDEX).exists():
                    log.warning("swap space: %s is unreadable (%s); removed", folder / INDEX, exc)
                remove_folder(folder)

    def _keeps_state(self, model_key: str, runtime: Runtime) -> bool:
        if runtime.info.saves_prefix_state:
            return True
        if model_key not in self._told_no_state:
            self._told_no_state.add(model_key)
            log.info("swap space: %s keeps no prefix-cache state on disk (its runtime saves none: ONNX Runtime, or "
                     "the prefix cache is off); it loads again with an empty cache", model_key)
        return False

    def _file_sha256(self, path: Path) -> str:
        stamp = file_stamp(path)
        if stamp not in self._hashes:
            self._hashes[stamp] = sha256_file(path)
        return self._hashes[stamp]


def _claim(directory: Path) -> None:
    """Make ``directory`` a swap space, or check that it is one: the space removes what it does not recognise in
    its folders, so it never takes over a directory holding anything else."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not (directory / MARKER).is_file():
            if any(directory.iterdir()):
                raise ConfigError(f"the swap space {directory} is a directory that holds other files",
                                  "pass a new or empty directory for the swap space")
            (directory / MARKER).write_text("edgeopt swap space: saved prefix caches of unloaded models\n")
    except OSError as exc:
        raise ConfigError(f"the swap space {directory}: {exc.strerror}",
                          "pass a writable directory for the swap space") from exc


def _index_bytes(entry: SavedEntry) -> int:
    """What naming ``entry`` adds to its model's index (near enough: the index's exact size is checked last)."""
    return len(ModelIndex("", 0.0, {}, [entry]).to_json()) - len(ModelIndex("", 0.0, {}, []).to_json()) + 1


def _require_identity(fingerprint: dict[str, Any]) -> None:
    if not fingerprint.get("model_sha256"):
        raise BackendError("a swap-space fingerprint without the model file's sha256 would match any model",
                           f"build it with SwapSpace.fingerprint; {ENGINE_BUG_HINT}")
