"""Compute an importance matrix as ``llama-imatrix`` does: run calibration text through the unquantized GGUF the
exporter just wrote (memory-mapped by llama.cpp) and sum each weight's matrix-multiply input squared, per column.

Why the GGUF and not the checkpoint in torch: torch needs the model in float32 in the process's own memory (an 8B
is 32 GB before a token runs), llama.cpp maps the F16/BF16 file (page cache, shared, evictable) and runs the F16
kernels llama-imatrix runs, at its speed. Names are the file's own (``blk.3.ffn_down.weight``); the output
matrix is included (``token_embd.weight`` when the embeddings are tied), which llama-imatrix leaves out by
default: Q4_K_M's Q6_K output rounds better with it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.matmul_inputs import MatmulInputTap

OUTPUT_MATRICES = ("output.weight", "token_embd.weight")  # the tied embedding is llama.cpp's output matrix


def is_quantized_matrix(name: str) -> bool:
    """A weight the quantizer weighs by the matrix: every block's matrix and the output matrix."""
    return (name.startswith("blk.") and name.endswith(".weight")) or name in OUTPUT_MATRICES


class _ColumnEnergy:
    """Sum of input squared per column, and tokens summed, per weight."""

    def __init__(self) -> None:
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, rows: np.ndarray) -> None:
        squares = np.einsum("ij,ij->j", rows, rows, dtype=np.float64)
        if name in self.sums:
            self.sums[name] += squares
            self.counts[name] += rows.shape[0]
        else:
            self.sums[name], self.counts[name] = squares, rows.shape[0]


def collect_imatrix(gguf: Path, token_chunks: list[list[int]], datasets: list[str],
                    report: Callable[[str], None] = lambda _m: None) -> ImportanceMatrix:
    """Run the chunks through ``gguf`` (the unquantized intermediate) and return the matrix."""
    from edgeopt.errors import ExportError
    from edgeopt.exporters.input_energy import MIN_CHUNK_TOKENS
    from edgeopt.runtimes.llama_cpp.matmul_inputs import run_chunks

    if not token_chunks:
        raise ExportError("the calibration text gives no chunk of tokens", f"give at least {MIN_CHUNK_TOKENS} tokens")
    collector = MatrixCollector()
    run_chunks(Path(gguf), token_chunks, collector.tap(), "importance matrix: calibration chunks", report)
    return collector.matrix(gguf, token_chunks, datasets)


class MatrixCollector:
    """Sums what a :class:`MatmulInputTap` shows into an importance matrix: fed calibration chunks (above), or
    text as the model decodes it (``tap(min_rows=1)``: each step carries a token a sequence)."""

    def __init__(self) -> None:
        self._energy = _ColumnEnergy()

    def tap(self, min_rows: int | None = None) -> MatmulInputTap:
        from edgeopt.runtimes.llama_cpp.matmul_inputs import MIN_ROWS, MatmulInputTap

        return MatmulInputTap(is_quantized_matrix, self._energy.add, MIN_ROWS if min_rows is None else min_rows)

    def matrix(self, gguf: Path, token_chunks: list[list[int]], datasets: list[str]) -> ImportanceMatrix:
        from edgeopt.errors import ExportError

        if not self._energy.sums:
            raise ExportError(f"llama.cpp ran the calibration text through {gguf} but no weight's input was seen",
                              "check that the chunks hold at least 16 tokens each")
        return ImportanceMatrix(sums=self._energy.sums, counts=self._energy.counts, chunk_count=len(token_chunks),
                                chunk_size=max(len(c) for c in token_chunks), datasets=list(datasets))
