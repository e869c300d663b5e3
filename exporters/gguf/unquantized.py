"""The unquantized GGUF of a checkpoint (F16, or BF16 for bf16 checkpoints): the quantizer's input, the file the
importance matrix and the self-calibration text are measured on, and the reference the evaluation compares
the bundle with.

One optimize run converts a checkpoint once: the file is kept in the run's workbench (a directory the pipeline
owns and removes when the run ends, edgeopt.optimize.workbench), named by the checkpoint's directory (a run
never rewrites a checkpoint it reads: passes write new ones), so the evaluation finds the file the export wrote instead of loading the original in float32 (an 8B: 32 GB).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any


def intermediate_type(model_dir: Path) -> str:
    """BF16 for bf16 checkpoints (F16 could overflow their range), else F16."""
    from edgeopt.exporters.gguf.safetensors_reader import SafetensorsCheckpoint

    return "BF16" if "BF16" in SafetensorsCheckpoint(Path(model_dir)).dtypes else "F16"


def unquantized_gguf(model_dir: Path, workbench: Path) -> tuple[Path, dict[str, Any]]:
    """(the unquantized GGUF of ``model_dir`` in ``workbench``, converted now unless an earlier step of the run
    did; the conversion's manifest facts, empty when it was already there). Written under a temporary name and
    renamed, so a file under the final name is always complete."""
    from edgeopt.exporters.gguf.tokenizer_check import check_gguf_tokenizer
    from edgeopt.exporters.gguf.writer import convert_checkpoint

    out_type = intermediate_type(model_dir)
    directory = hashlib.sha256(str(Path(model_dir).resolve()).encode()).hexdigest()[:16]
    target = Path(workbench) / f"{directory}-{out_type}.gguf"
    if target.is_file():
        return target, {}
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        facts = convert_checkpoint(Path(model_dir), partial, out_type)
        facts |= check_gguf_tokenizer(partial, Path(model_dir))  # before any further work
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    return target, facts
