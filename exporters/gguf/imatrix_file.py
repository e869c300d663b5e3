"""An importance matrix in memory, and llama.cpp's GGUF file format for it.

For every weight llama.cpp quantizes, the matrix holds, per input column, the sum over calibration
tokens of that column's activation squared (``x_j**2``), and how many tokens were summed. The
quantizer weighs each column's rounding error by the mean (sum / count): columns that carry large
activations are kept more precise. The file layout is the one ``llama-imatrix`` writes and
``llama-quantize --imatrix`` reads (tools/imatrix, common/imatrix-loader in llama.cpp): per weight
``<name>.in_sum2`` (F32, one row of input columns) and ``<name>.counts`` (F32, one value), with
``general.type = imatrix``, ``imatrix.datasets``, ``imatrix.chunk_count`` and ``imatrix.chunk_size``.
Pure numpy + gguf: no torch, no llama.cpp.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ExportError

_SUMS, _COUNTS = ".in_sum2", ".counts"


@dataclass
class ImportanceMatrix:
    sums: dict[str, np.ndarray] = field(default_factory=dict)  # llama.cpp tensor name -> sum of x^2 per column
    counts: dict[str, int] = field(default_factory=dict)  # tokens summed, per tensor
    chunk_count: int = 0
    chunk_size: int = 0
    datasets: list[str] = field(default_factory=list)  # where the text came from (a file name, "self-generated")

    def means(self) -> dict[str, np.ndarray]:
        """Per-column mean of x^2: what llama.cpp's quantizer weighs errors with."""
        return {name: (self.sums[name] / max(self.counts[name], 1)).astype(np.float32) for name in self.sums}


def write_imatrix(path: Path, matrix: ImportanceMatrix) -> None:
    import gguf

    if not matrix.sums:
        raise ExportError("the importance matrix is empty", "calibrate with a text of at least one chunk")
    # The architecture key is required by gguf-py's writer; llama.cpp's loader ignores it.
    writer = gguf.GGUFWriter(str(path), arch="imatrix")
    writer.add_type("imatrix")
    writer.add_array("imatrix.datasets", list(matrix.datasets) or ["unknown"])
    writer.add_uint32("imatrix.chunk_count", int(matrix.chunk_count))
    writer.add_uint32("imatrix.chunk_size", int(matrix.chunk_size))
    for name in sorted(matrix.sums):
        writer.add_tensor(name + _SUMS, np.asarray(matrix.sums[name], dtype=np.float32).reshape(1, -1))
        writer.add_tensor(name + _COUNTS, np.array([[float(matrix.counts[name])]], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _field(reader: Any, key: str) -> Any:
    found = reader.fields.get(key)
    return None if found is None else found.contents()


def read_imatrix(path: Path) -> ImportanceMatrix:
    """Read a GGUF imatrix (ours or llama-imatrix's). Mixture-of-experts files (several counts) are refused."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    if _field(reader, "general.type") != "imatrix":
        raise ExportError(f"{path} is not a GGUF importance matrix (general.type is not 'imatrix')",
                          "give a file written by llama-imatrix or by edgeopt optimize (imatrix.gguf)")
    tensors = {t.name: np.asarray(t.data, dtype=np.float32) for t in reader.tensors}
    matrix = ImportanceMatrix(chunk_count=int(_field(reader, "imatrix.chunk_count") or 0),
                              chunk_size=int(_field(reader, "imatrix.chunk_size") or 0),
                              datasets=list(_field(reader, "imatrix.datasets") or []))
    for key, values in tensors.items():
        if not key.endswith(_SUMS):
            continue
        name = key[: -len(_SUMS)]
        counts = tensors.get(name + _COUNTS)
        if counts is None or counts.size != 1:
            raise ExportError(f"{path}: {name} has {0 if counts is None else counts.size} counts; one is supported",
                              "mixture-of-experts importance matrices are not supported")
        matrix.sums[name] = values.reshape(-1).astype(np.float64)
        matrix.counts[name] = int(counts.reshape(-1)[0])
    return matrix


class QuantizerImatrix:
    """The matrix as llama.cpp's quantizer takes it in-process: a NULL-terminated array of
    ``llama_model_imatrix_data`` (name, float pointer, length). Keeps the buffers alive while in use."""

    def __init__(self, matrix: ImportanceMatrix) -> None:
        import llama_cpp

        self._means = {name: np.ascontiguousarray(values) for name, values in matrix.means().items()}
        self._names = {name: name.encode() for name in self._means}
        entries = (llama_cpp.llama_model_imatrix_data * (len(self._means) + 1))()
        for i, (name, values) in enumerate(self._means.items()):
            entries[i].name = self._names[name]
            entries[i].data = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            entries[i].size = values.size
        entries[len(self._means)].name = None  # the terminator llama.cpp stops at
        self.entries = entries

    def pointer(self) -> Any:
        import llama_cpp

        return ctypes.cast(self.entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
