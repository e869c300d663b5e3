"""The optimize command's compression flags as the pipeline's pass list (no torch here).

Data files enter the pass parameters with their sha256, so the pass cache (keyed by parameters and
input) notices when the *content* of a file changes, not only its path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.store.bundle import sha256_file
from edgeopt.errors import ConfigError

# The last this many tokens of a --distil-data file are never trained or calibrated on: the passes measure the
# pruned and distilled model there, and optimize --draft-for the draft's acceptance (at most a fifth of a
# small file: edgeopt.passes.distil_data.split_tokens).
HOLDOUT_TOKENS = 8192


def compression_passes(ratio: float | None, heads: float | None, mlp: float | None, layers: int | None,
                       distil: bool | None, distil_data: Path | None, distil_steps: int,
                       fit: bool) -> list[tuple[str, dict[str, Any]]]:
    """[("prune", {...}), ("distil", {...})] as requested; ``--fit`` may add the prune pass later."""
    knobs = {k: v for k, v in (("ratio", ratio), ("heads", heads), ("mlp", mlp), ("layers", layers)) if v is not None}
    data: dict[str, str] = {}
    if distil_data is not None:
        if not distil_data.is_file():
            raise ConfigError(f"--distil-data {distil_data} is not a file", "pass a plain-text training file")
        data = {"path": str(distil_data.resolve()), "sha256": sha256_file(distil_data)}
    may_prune = bool(knobs) or fit
    wants_distil = distil if distil is not None else bool(data) and may_prune
    if wants_distil and not may_prune:
        raise ConfigError("--distil was given without --prune, --prune-* or --fit: there is nothing to recover",
                          "add --prune 0.25 (or --fit), or drop --distil")
    if wants_distil and not data:
        raise ConfigError("--distil needs training text and no --distil-data was given",
                          "pass --distil-data FILE (plain text), or --no-distil")
    if distil_steps < 1:
        raise ConfigError(f"--distil-steps {distil_steps} must be at least 1", "pass e.g. --distil-steps 200")
    passes: list[tuple[str, dict[str, Any]]] = []
    if knobs:
        calib = {"calib_data": data["path"], "calib_sha256": data["sha256"]} if data else {}
        passes.append(("prune", {**knobs, **calib}))
    if wants_distil:
        passes.append(("distil", {"data": data["path"], "data_sha256": data["sha256"], "steps": distil_steps}))
    return passes
