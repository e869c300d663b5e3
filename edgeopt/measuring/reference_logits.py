"""The reference's logits of every evaluation window, kept on disk between the two halves of an evaluation.

An evaluation runs the original and then the bundle's model, never both at once: the original's logits of
every window go to files here (written as it writes the evaluation text, or scored afterwards), then it is
closed and the bundle's model is loaded. At 1B that keeps one model mapped instead of two (the F16 reference's
2.3 GiB beside the Q4_K_M's 0.75 GiB), as ``llama-perplexity --kl-divergence-base`` does with its logits file.
A window is read back whole when it is compared (window x vocabulary float32: 256 x 128k = 128 MiB), never
mapped, so it leaves no pages behind.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from edgeopt.errors import EvaluationError


class StoredLogits:
    """Window ``i``'s logits (float32, positions x vocabulary) in ``directory``/``i``.f32, raw rows. A window
    grows a few rows at a time (``extend``: text being decoded gives every window one row a step), so a decoded
    text's logits never sit in memory together."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self._vocab: int | None = None

    def append(self, logits: np.ndarray) -> None:
        """A whole window, after the last one."""
        self.extend(self.count, logits)

    def extend(self, index: int, rows: np.ndarray) -> None:
        """Rows (positions x vocabulary) appended to window ``index`` (a new window when it is the next one)."""
        if not 0 <= index <= self.count:
            raise IndexError(f"window {index} of {self.count}: windows are started in order")
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or (self._vocab is not None and rows.shape[1] != self._vocab):
            raise EvaluationError(f"logit rows of shape {rows.shape} among windows of {self._vocab} columns",
                                  "store one model's logits per evaluation")
        self._vocab = rows.shape[1]
        with open(self._path(index), "ab") as out:
            out.write(rows.tobytes())
        self.count = max(self.count, index + 1)

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < self.count:
            raise IndexError(f"window {index} of {self.count}")
        return np.fromfile(self._path(index), dtype=np.float32).reshape(-1, self._vocab)

    def _path(self, index: int) -> Path:
        return self.directory / f"{index}.f32"


@contextmanager
def stored_logits(workbench: Path | None) -> Iterator[StoredLogits]:
    """A store under the run's workbench (or a temporary directory), removed when the block ends."""
    parent = Path(workbench) if workbench is not None else None
    directory = Path(tempfile.mkdtemp(prefix="reference-logits-", dir=parent))
    try:
        yield StoredLogits(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
