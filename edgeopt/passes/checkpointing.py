"""Training checkpoints that survive a kill: ``work_dir/step-00000040/`` (accelerate state + meta.json).

A checkpoint is written into a hidden temporary directory and renamed into place only once complete
(meta.json is the last file), so a run killed mid-save leaves at worst a stale temp directory that
is ignored and cleaned up. Under several processes every rank joins ``save_state`` (FSDP shards
need all ranks) and only the main process renames; ``work_dir`` must be on a filesystem all ranks
share.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

PREFIX = "step-"
META = "meta.json"


def checkpoint_dir(work_dir: Path, step: int) -> Path:
    return work_dir / f"{PREFIX}{step:08d}"


def latest_checkpoint(work_dir: Path | None) -> tuple[int, Path] | None:
    """(step, directory) of the newest complete checkpoint, or None."""
    if work_dir is None or not work_dir.is_dir():
        return None
    complete = [(int(p.name[len(PREFIX):]), p) for p in work_dir.iterdir()
                if p.is_dir() and p.name.startswith(PREFIX) and (p / META).is_file()]
    return max(complete) if complete else None


def save_checkpoint(accelerator: Any, work_dir: Path, step: int, meta: dict[str, Any], keep: int = 2) -> Path:
    """Save model/optimizer/RNG state at ``step``; keep only the newest ``keep`` checkpoints."""
    final = checkpoint_dir(work_dir, step)
    tmp = work_dir / f".tmp-{final.name}"
    if accelerator.is_main_process:
        work_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / META).write_text(json.dumps({**meta, "step": step}, indent=2))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _prune_old(work_dir, keep)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Any, path: Path) -> dict[str, Any]:
    accelerator.load_state(str(path))
    return json.loads((path / META).read_text())


def _prune_old(work_dir: Path, keep: int) -> None:
    complete = sorted(p for p in work_dir.iterdir() if p.is_dir() and p.name.startswith(PREFIX))
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in work_dir.glob(".tmp-*"):  # left by a run killed while saving
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
