"""GGUF files assembled from tensors already quantized, instead of quantized again by llama.cpp.

llama.cpp quantizes a tensor the same way whatever else the file holds (the same type and importance matrix give the
same bytes, and ggml's own function quantizes it in process: exporters/gguf/mix/ggml_rows.py). So every file the mix
measures or writes is the all-Q8_0 reference's header and data with some tensors' bytes put in (:func:`splice`): the
22 group files of SmolLM2's sensitivity measurement (their probe types, kept while the errors were measured), and the
llama.cpp recipes the mix competes with and the mix itself, each (tensor, type) quantized once (:func:`quantize_into`)
where three quantizations by llama.cpp repeated most of them (SmolLM2 at Q4_K_M's size: 357 distinct of 633).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np
from gguf import GGMLQuantizationType, LlamaFileType

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.mix.measure import ROWS_PER_READ
from edgeopt.exporters.gguf.tensor_data import infos_of, tensor_bytes
from edgeopt.sources.gguf_metadata import read_gguf_metadata

_COPY_BLOCK = 16 << 20  # bytes copied at a time: a 128k-token embedding is hundreds of MB at any type


class TensorStore:
    """Quantized tensors' bytes kept in one file: (name, type name) -> (offset, length)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.index: dict[tuple[str, str], tuple[int, int]] = {}
        path.write_bytes(b"")

    def put(self, name: str, type_name: str, parts: Iterable[np.ndarray]) -> None:
        """A tensor's bytes at ``type_name``, as the file would hold them, in ``parts`` of whole rows."""
        with self.path.open("ab") as out:
            first = out.tell()
            for part in parts:
                out.write(part.tobytes())
            self.index[(name, type_name)] = (first, out.tell() - first)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self.index

    def copy(self, key: tuple[str, str], out: BinaryIO) -> None:
        """Write the stored bytes of ``key`` to the open file ``out``, a block at a time."""
        offset, length = self.index[key]
        with self.path.open("rb") as stored:
            stored.seek(offset)
            _copy(stored, out, length)


def quantize_into(store: TensorStore, unquantized: Path, types: Mapping[str, str],
                  importance: Mapping[str, np.ndarray], threads: int, label: str = "quantizing") -> None:
    """Quantize in process, whole, every tensor of ``types`` at its type that ``store`` does not hold yet."""
    from edgeopt.exporters.gguf.mix.ggml_rows import dequantize_rows, quantize_rows
    from edgeopt.progress import progress

    todo = [name for name, ttype in types.items() if (name, ttype) not in store]
    for info, data in progress(tensor_bytes(unquantized, todo), label, total=len(todo)):
        rows, ttype = data.reshape(-1, data.shape[-1]), types[info.name]
        reads = (dequantize_rows(info.type_name, rows[first:first + ROWS_PER_READ])
                 for first in range(0, len(rows), ROWS_PER_READ))
        store.put(info.name, ttype, (quantize_rows(ttype, read, importance.get(info.name), threads) for read in reads))


def splice(reference: Path, types: Mapping[str, str], store: TensorStore, dst: Path,
           file_type: str | None = None) -> None:
    """Write ``dst``: ``reference`` with each tensor of ``types`` at its type, its bytes from ``store`` (where the type
    is the reference's own, the reference's). ``file_type``: llama.cpp's name of the file's type (``Q4_K_M``) for
    ``general.file_type``, which llama.cpp's quantizer would have written; None keeps the reference's."""
    meta = read_gguf_metadata(reference)
    infos = infos_of(meta)
    replaced = {name: ttype for name, ttype in types.items() if name in infos and ttype != infos[name].type_name}
    alignment = int(meta.values.get("general.alignment", 32))
    sizes = {name: store.index[(name, replaced[name])][1] if name in replaced else info.data_bytes
             for name, info in infos.items()}
    offsets, at = {}, 0
    for name in infos:  # the reference's order, each tensor's data aligned as llama.cpp writes it
        offsets[name] = at
        at = _aligned(at + sizes[name], alignment)
    with reference.open("rb") as source, dst.open("wb") as out:
        header = source.read(meta.tensor_infos_offset)  # magic, counts and metadata as they were
        out.write(header if file_type is None else _with_file_type(header, LlamaFileType[f"MOSTLY_{file_type}"]))
        for name, info in infos.items():
            encoded = name.encode()
            ttype = replaced.get(name, info.type_name)
            out.write(struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", len(info.shape)))
            out.write(struct.pack(f"<{len(info.shape)}Q", *info.shape))
            out.write(struct.pack("<IQ", GGMLQuantizationType[ttype].value, offsets[name]))
        data_start = _aligned(out.tell(), alignment)
        for name, info in infos.items():
            out.write(b"\0" * (data_start + offsets[name] - out.tell()))
            if name in replaced:
                store.copy((name, replaced[name]), out)
            else:
                source.seek(info.offset)
                _copy(source, out, info.data_bytes)
        out.write(b"\0" * (data_start + at - out.tell()))


def _with_file_type(header: bytes, file_type: int) -> bytes:
    """``header`` with the value of ``general.file_type`` (a uint32) replaced."""
    key = b"general.file_type"
    entry = struct.pack("<Q", len(key)) + key + struct.pack("<I", 4)  # 4: GGUF's uint32
    at = header.find(entry)
    if at < 0:
        raise ExportError("the Q8_0 reference llama.cpp wrote has no uint32 general.file_type",
                          "report it: the llama.cpp build writes GGUF headers edgeopt does not know")
    value = at + len(entry)
    return header[:value] + struct.pack("<I", int(file_type)) + header[value + 4:]


def _copy(source: BinaryIO, out: BinaryIO, length: int) -> None:
    while length > 0:
        block = source.read(min(length, _COPY_BLOCK))
        out.write(block)
        length -= len(block)


def _aligned(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment
