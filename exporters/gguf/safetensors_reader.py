"""Read a checkpoint's safetensors files one tensor at a time, memory-mapped, with bounded RSS.

Pages of a memory-mapped file count towards the process's resident set once touched, and the kernel
keeps them there until it needs the memory. Converting a model tensor by tensor through a plain
mmap would therefore let RSS climb to the whole checkpoint size. After each tensor is consumed we
tell the kernel we no longer need its pages (``MADV_DONTNEED``), so the peak stays near the size of
the largest tensor instead of the model. Pure numpy: no torch, no safetensors package needed.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8}


@dataclass(frozen=True)
class StoredTensor:
    file: Path
    dtype: str  # safetensors dtype name
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def _read_header(path: Path) -> dict[str, StoredTensor]:
    with path.open("rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(header_len))
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = StoredTensor(path, info["dtype"], tuple(info["shape"]), base + begin, base + end)
    return out


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) to float32: bf16 is the top half of an f32. Shifted in place: a second temporary
    would double the peak (a 128k x 2048 embedding: 1 GB more)."""
    bits = raw.astype(np.uint32)
    bits <<= 16
    return bits.view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits with round-to-nearest-even (what torch and llama.cpp do)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(values)
    if nan.any():  # keep NaN a NaN (rounding could carry it into infinity)
        rounded = np.where(nan, np.uint32(0x7FC0), rounded)
    return rounded.astype(np.uint16)


class SafetensorsCheckpoint:
    """All tensors of a checkpoint directory (single file or sharded with an index)."""

    def __init__(self, model_dir: Path) -> None:
        files = sorted(Path(model_dir).glob("*.safetensors"))
        if not files:
            raise ExportError(f"{model_dir} has no .safetensors weights",
                              "save the model with save_pretrained(..., safe_serialization=True)")
        self.tensors: dict[str, StoredTensor] = {}
        for path in files:
            self.tensors.update(_read_header(path))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    @property
    def dtypes(self) -> set[str]:
        return {t.dtype for t in self.tensors.values()}

    @contextmanager
    def open_f32(self, name: str) -> Iterator[np.ndarray]:
        """Yield the tensor as float32; its mapped pages are released when the block exits."""
        stored = self.tensors[name]
        if stored.dtype not in ("F32", "F16", "BF16"):
            raise ExportError(f"tensor {name} has dtype {stored.dtype}; only F32, F16 and BF16 weights convert",
                              "dequantize the checkpoint first (load it in transformers and save_pretrained)")
        with stored.file.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            count = (stored.end - stored.start) // np.dtype(_DTYPES[stored.dtype]).itemsize
            raw = np.frombuffer(mm, dtype=_DTYPES[stored.dtype], count=count, offset=stored.start)
            if stored.dtype == "BF16":
                values = bf16_to_f32(raw)
            elif stored.dtype == "F16":
                values = raw.astype(np.float32)
            else:
                values = raw.copy()  # a private copy, so the mapping can be dropped right away
            del raw
            _release(mm, stored.start, stored.end)
            yield values.reshape(stored.shape)


def _release(mm: mmap.mmap, start: int, end: int) -> None:
    page = mmap.PAGESIZE
    aligned = start - start % page
    length = end - aligned
    if hasattr(mm, "madvise") and length > 0:
        mm.madvise(mmap.MADV_DONTNEED, aligned, length)
