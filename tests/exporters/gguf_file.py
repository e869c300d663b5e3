"""A fast, read-only view of a GGUF file's header for tests: metadata, tensor infos and F32 data.

gguf-py's GGUFReader builds numpy views for every string of the vocabulary and takes ~18 s on a
128k-token file; comparing several such files per test needs the plain values in well under a second.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<?", 10: "<u8", 11: "<i8",
          12: "<f8"}
F32, F16 = 0, 1  # ggml tensor types


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]  # ggml order (fastest dimension first), as gguf stores it
    ggml_type: int
    offset: int


@dataclass
class GGUFFile:
    path: Path
    fields: dict[str, Any]
    tensors: dict[str, TensorInfo]
    data_start: int

    def tensor_f32(self, name: str) -> np.ndarray:
        """An F32 tensor's values in numpy (row-major) order."""
        info = self.tensors[name]
        assert info.ggml_type == F32, f"{name} is ggml type {info.ggml_type}, not F32"
        count = int(np.prod(info.shape))
        data = np.fromfile(self.path, dtype="<f4", count=count, offset=self.data_start + info.offset)
        return data.reshape(tuple(reversed(info.shape)))


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        text = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return text

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.take("<I"), self.take("<Q")
            if item in _NUMPY:
                arr = np.frombuffer(self.data, dtype=_NUMPY[item], count=n, offset=self.pos)
                self.pos += arr.nbytes
                return arr.tolist()
            return [self.value(item) for _ in range(n)]
        return self.take(_SCALARS[kind])


def read_gguf(path: Path) -> GGUFFile:
    data = Path(path).read_bytes()
    cur = _Cursor(data)
    assert data[:4] == b"GGUF", f"{path} is not a GGUF file"
    cur.pos = 4
    cur.take("<I")  # version
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        fields[key] = cur.value(cur.take("<I"))
    tensors: dict[str, TensorInfo] = {}
    for _ in range(n_tensors):
        name = cur.string()
        dims = tuple(cur.take("<Q") for _ in range(cur.take("<I")))
        tensors[name] = TensorInfo(dims, cur.take("<I"), cur.take("<Q"))
    alignment = int(fields.get("general.alignment", 32))
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    return GGUFFile(Path(path), fields, tensors, data_start)
