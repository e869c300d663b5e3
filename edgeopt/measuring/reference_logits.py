"""The reference's logits of every evaluation window, kept on disk between the two halves of an evaluation.

An evaluation runs the original and then the bundle's model, never both at once: the original scores every
window first and its logits go to files here, then it is closed and the bundle's model is loaded. At 1B that
keeps one model mapped instead of two (the F16 reference's 2.3 GiB beside the Q4_K_M's 0.75 GiB), as
``llama-perplexity --kl-divergence-base`` does with its logits file. A window is read back whole when it is
compared (window x vocabulary float32: 256 x 128k = 128 MiB), never mapped, so it leaves no pages behind.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np


class StoredLogits:
    """Window ``i``'s logits (float32, positions x vocabulary) in ``directory``/``i``.npy."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def append(self, logits: np.ndarray) -> None:
        np.save(self.directory / f"{self.count}.npy", np.ascontiguousarray(logits, dtype=np.float32))
        self.count += 1

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < self.count:
            raise IndexError(f"window {index} of {self.count}")
        return np.load(self.directory / f"{index}.npy")


@contextmanager
def stored_logits(workbench: Path | None) -> Iterator[StoredLogits]:
    """A store under the run's workbench (or a temporary directory), removed when the block ends."""
    parent = Path(workbench) if workbench is not None else None
    directory = Path(tempfile.mkdtemp(prefix="reference-logits-", dir=parent))
    try:
        yield StoredLogits(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
