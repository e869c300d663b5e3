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


# /proc/cpuinfo flags of CPUs with BF16 dot products (x86 AVX512-BF16 or AMX, ARM's BF16 extension). Elsewhere
# llama.cpp widens BF16 to F32 in software: on an AVX2 EPYC the 1B shape's importance matrix took 19 s a chunk from
# BF16 against 12 s from F16.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def intermediate_type(model_dir: Path) -> str:
    """F16, unless the checkpoint is bf16 and this CPU computes BF16 natively: then BF16 (no rounding at all).
    A bf16 checkpoint whose weights F16 cannot hold is converted to BF16 all the same (unquantized_gguf)."""
    from edgeopt.exporters.gguf.safetensors_reader import SafetensorsCheckpoint
    from edgeopt.profiles.host import cpu_flags

    bf16 = "BF16" in SafetensorsCheckpoint(Path(model_dir)).dtypes
    return "BF16" if bf16 and cpu_flags() & _BF16_FLAGS else "F16"


def unquantized_gguf(model_dir: Path, workbench: Path) -> tuple[Path, dict[str, Any]]:
    """(the unquantized GGUF of ``model_dir`` in ``workbench``, converted now unless an earlier step of the run
    did; the conversion's manifest facts, empty when it was already there). Written under a temporary name and
    renamed, so a file under the final name is always complete."""
    from edgeopt.exporters.gguf.tokenizer_check import check_gguf_tokenizer
    from edgeopt.exporters.gguf.writer import F16OverflowError, convert_checkpoint

    out_type = intermediate_type(model_dir)
    directory = hashlib.sha256(str(Path(model_dir).resolve()).encode()).hexdigest()[:16]
    target = Path(workbench) / f"{directory}-{out_type}.gguf"
    fallback = target.with_name(f"{directory}-BF16.gguf")  # where F16 overflowed
    for done in (target, fallback):
        if done.is_file():
            return done, {}
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        try:
            facts = convert_checkpoint(Path(model_dir), partial, out_type)
        except F16OverflowError:  # a weight past F16's range: BF16 holds every bf16 value
            target = fallback
            facts = convert_checkpoint(Path(model_dir), partial, "BF16")
        facts |= check_gguf_tokenizer(partial, Path(model_dir))  # before any further work
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    return target, facts
