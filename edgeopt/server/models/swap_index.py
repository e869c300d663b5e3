"""One model's saved prefix cache on disk (:mod:`edgeopt.server.models.swap_space`): its folder, the index
naming its state files, and the checks a state file passes before llama.cpp may read it.

``<swap dir>/<model key>/`` (the key %-quoted where it is not a plain file name):

* ``index.json``: ``{"format", "model_key", "saved_at", "fingerprint": {...}, "entries": [{"file", "tokens",
  "bytes", "sha256", "namespace"}, ...]}``, entries most recently used first (``namespace``: whose entry it
  is, a tenant's on a server with API keys; it comes back into that namespace only). Written last, by ``os.replace``: a state file
  it does not name is left over from an interrupted save and is removed.
* ``<save stamp>-<n>.kvstate``: one prefix-cache entry, llama.cpp's ``llama_state_seq_save_file`` of its
  sequence (its tokens, then its KV). Each save names its files anew, so an index never names a file another
  save half wrote.
* ``*.partial``: a file being written; renamed when whole.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from edgeopt.engine.api import SHARED_NAMESPACE
from edgeopt.store.bundle import sha256_file

# Bump when the layout or what the fingerprint covers changes. 2: entries carry their namespace (an index of
# format 1 names none, and could put a tenant's prompt where every tenant reads it: it is ignored and removed).
SWAP_FORMAT = 2
INDEX = "index.json"
STATE_SUFFIX = ".kvstate"
PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class SavedEntry:
    file: str  # name inside the model's folder
    tokens: list[int]  # what the state holds: the cache entry's whole token path
    bytes: int
    sha256: str
    namespace: str = SHARED_NAMESPACE  # the prefix cache's namespace it was saved from (edgeopt.engine.prefix_tree)


@dataclass(frozen=True)
class ModelIndex:
    model_key: str
    saved_at: float  # time.time() of the save: the least recently saved model's entries are evicted first
    fingerprint: dict[str, Any]
    entries: list[SavedEntry]  # most recently used first: the last ones are evicted first

    def to_json(self) -> str:
        data = {"format": SWAP_FORMAT, "model_key": self.model_key, "saved_at": self.saved_at,
                "fingerprint": self.fingerprint, "entries": [asdict(entry) for entry in self.entries]}
        return json.dumps(data, separators=(",", ":")) + "\n"

    def without(self, names: set[str]) -> ModelIndex:
        return ModelIndex(self.model_key, self.saved_at, self.fingerprint,
                          [entry for entry in self.entries if entry.file not in names])


def folder_name(model_key: str) -> str:
    """The model's folder: its key where that is a plain file name, %-quoted otherwise (never hidden)."""
    name = quote(model_key, safe="-_.+=@,")
    return "%2E" + name[1:] if name.startswith(".") else name


def read_index(folder: Path) -> ModelIndex:
    """The folder's index; ValueError naming what is wrong when it is not one this edgeopt wrote."""
    data = json.loads((folder / INDEX).read_text())
    if not isinstance(data, dict) or data.get("format") != SWAP_FORMAT:
        raise ValueError(f"not a swap index of format {SWAP_FORMAT}")
    if not isinstance(data.get("fingerprint"), dict) or not isinstance(data.get("entries"), list):
        raise ValueError("no fingerprint or entries")
    entries = [_entry(item) for item in data["entries"]]
    if not isinstance(data.get("saved_at"), (int, float)) or not isinstance(data.get("model_key"), str):
        raise ValueError("no saved_at or model_key")
    return ModelIndex(data["model_key"], float(data["saved_at"]), data["fingerprint"], entries)


def _entry(item: Any) -> SavedEntry:
    if not isinstance(item, dict):
        raise ValueError(f"an entry is {type(item).__name__}, not an object")
    entry = SavedEntry(item.get("file"), item.get("tokens"), item.get("bytes"), item.get("sha256"),
                       item.get("namespace"))
    if not (isinstance(entry.file, str) and entry.file.endswith(STATE_SUFFIX) and "/" not in entry.file
            and isinstance(entry.tokens, list) and entry.tokens and all(isinstance(t, int) for t in entry.tokens)
            and isinstance(entry.bytes, int) and isinstance(entry.sha256, str) and isinstance(entry.namespace, str)):
        raise ValueError(f"a malformed entry ({str(item)[:80]})")
    return entry


def write_index(folder: Path, index: ModelIndex) -> None:
    """Replace the folder's index at once; a folder left without entries is removed."""
    if not index.entries:
        remove_folder(folder)
        return
    partial = folder / (INDEX + PARTIAL_SUFFIX)
    partial.write_text(index.to_json())
    os.replace(partial, folder / INDEX)


def state_problem(folder: Path, entry: SavedEntry) -> str | None:
    """Why the entry's state file must not be loaded (missing, truncated, altered), or None when it is whole."""
    path = folder / entry.file
    try:
        size = path.stat().st_size
    except OSError:
        return "is missing"
    if size != entry.bytes:
        return f"holds {size} bytes, not the {entry.bytes} saved (truncated or altered)"
    if sha256_file(path) != entry.sha256:
        return "does not match the sha256 saved with it (altered)"
    return None


def fingerprint_differences(stored: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    return [f"{key} {stored.get(key)!r} (this server: {value!r})" for key, value in expected.items()
            if stored.get(key) != value]


def remove_strays(folder: Path, keep: set[str]) -> None:
    """Remove the folder's state and partial files ``keep`` does not name (an interrupted save's)."""
    for path in folder.iterdir():
        if path.name not in keep and path.name != INDEX and path.name.endswith((STATE_SUFFIX, PARTIAL_SUFFIX)):
            path.unlink(missing_ok=True)


def remove_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def folder_bytes(folder: Path) -> int:
    """Bytes of the folder's committed files (the index and its states; not a partial file being written)."""
    total = 0
    for path in folder.iterdir():
        if path.is_file() and not path.name.endswith(PARTIAL_SUFFIX):
            total += path.stat().st_size
    return total
