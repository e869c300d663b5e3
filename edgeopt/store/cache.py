"""Content-addressed cache of pass and export outputs (``$EDGEOPT_CACHE`` or ~/.cache/edgeopt)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeopt.store.staging import work_dir

# Every work directory in cache/steps/ starts with a dot, whatever its step: one call cleans them all.
STAGE_PREFIX = "."


def cache_root() -> Path:
    root = Path(os.environ.get("EDGEOPT_CACHE", Path.home() / ".cache" / "edgeopt"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def step_key(kind: str, name: str, params: dict[str, Any], input_hash: str) -> str:
    blob = json.dumps({"kind": kind, "name": name, "params": params, "input": input_hash}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cached_step(key: str, produce: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any], bool]:
    """Return (output dir, metrics, was_cached). ``produce(out_dir)`` runs only on a cache miss.

    The output is built in a hidden sibling and renamed into place, so a crash never leaves a partial
    entry that a later run would mistake for a hit; the next call removes the siblings of killed runs.
    """
    final = cache_root() / "steps" / key
    meta = final / ".edgeopt-step.json"
    if meta.is_file():
        return final, json.loads(meta.read_text()), True
    with work_dir(final.parent, STAGE_PREFIX) as tmp:
        metrics = produce(tmp)
        (tmp / ".edgeopt-step.json").write_text(json.dumps(metrics, default=str))
        if final.exists() and not meta.is_file():
            shutil.rmtree(final)  # a leftover without its marker is not a valid entry
        try:
            tmp.rename(final)
        except OSError:
            # Another process finished the same step first: its entry is as good as ours.
            if not meta.is_file():
                raise
            return final, json.loads(meta.read_text()), True
    return final, metrics, False

