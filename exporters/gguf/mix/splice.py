"""A group's file for the sensitivity measurement, assembled from bytes already quantized instead of quantized again.

Each group's file is the all-Q8_0 reference with the group's tensors at their probe type. llama.cpp quantizes a
tensor the same way whatever else the file holds (the same type and importance matrix give the same bytes), and
measuring every tensor's rounding errors quantized it whole at its probe type (exporters/gguf/mix/costs.py). Those
bytes kept (:class:`TensorStore`), a group's file is the reference's header and data with those tensors' bytes put in
(:func:`splice`): a copy of the file instead of a quantization of the whole model, 22 of them for SmolLM2.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from edgeopt.exporters.gguf.tensor_data import infos_of
from edgeopt.sources.gguf_metadata import read_gguf_metadata


class TensorStore:
    """Quantized tensors' bytes kept in one file: name -> (type name, offset, length)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.index: dict[str, tuple[str, int, int]] = {}
        path.write_bytes(b"")

    def put(self, name: str, type_name: str, data: np.ndarray) -> None:
        """A tensor's bytes at ``type_name``, as the file would hold them."""
        with self.path.open("ab") as out:
            self.index[name] = (type_name, out.tell(), data.nbytes)
            out.write(data.tobytes())

    def read(self, name: str) -> bytes:
        _, offset, length = self.index[name]
        with self.path.open("rb") as stored:
            stored.seek(offset)
            return stored.read(length)


def splice(reference: Path, names: Iterable[str], store: TensorStore, dst: Path) -> None:
    """Write ``dst``: ``reference`` with the tensors of ``names`` as ``store`` holds them (their type and bytes)."""
    meta = read_gguf_metadata(reference)
    infos = infos_of(meta)
    replaced = set(names)
    alignment = int(meta.values.get("general.alignment", 32))
    types = {name: store.index[name][0] if name in replaced else info.type_name for name, info in infos.items()}
    sizes = {name: store.index[name][2] if name in replaced else info.data_bytes for name, info in infos.items()}
    offsets, at = {}, 0
    for name in infos:  # the reference's order, each tensor's data aligned as llama.cpp writes it
        offsets[name] = at
        at = _aligned(at + sizes[name], alignment)
    with reference.open("rb") as source, dst.open("wb") as out:
        out.write(source.read(meta.tensor_infos_offset))  # magic, counts and metadata as they were
        for name, info in infos.items():
            encoded = name.encode()
            out.write(struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", len(info.shape)))
            out.write(struct.pack(f"<{len(info.shape)}Q", *info.shape))
            out.write(struct.pack("<IQ", GGMLQuantizationType[types[name]].value, offsets[name]))
        data_start = _aligned(out.tell(), alignment)
        for name, info in infos.items():
            out.write(b"\0" * (data_start + offsets[name] - out.tell()))
            if name in replaced:
                out.write(store.read(name))
            else:
                source.seek(info.offset)
                out.write(source.read(info.data_bytes))
        out.write(b"\0" * (data_start + at - out.tell()))


def _aligned(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment
