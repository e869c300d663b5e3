"""A GGUF's tensors as numpy views of the file, found by edgeopt's header reader (edgeopt.sources.gguf_metadata).

gguf-py's GGUFReader decodes every metadata field when it opens a file, each of the vocabulary's strings into a
numpy object of its own: the size-budgeted mix (exporters/gguf/mix/) opened its files ~40 times, 170 s of
SmolLM2-135M's 440 s (a 49k vocabulary), and Gemma 3's 262k tokens cost five times more an opening. The header
reader hops over the vocabulary and keeps where each tensor's data starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from edgeopt.sources.gguf_metadata import GgufMetadata, read_gguf_metadata


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str  # ggml's name of its type ("Q8_0", "F16")
    shape: tuple[int, ...]  # GGUF's order: the row length (columns) first
    offset: int  # where its data starts in the file

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape))

    @property
    def row_length(self) -> int:
        return self.shape[0]

    @property
    def row_bytes(self) -> int:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[self.type_name]]
        return self.row_length // block * block_bytes

    @property
    def data_bytes(self) -> int:
        """Its data's bytes in the file, alignment padding left out."""
        return self.elements // self.row_length * self.row_bytes


def tensor_infos(path: Path) -> dict[str, TensorInfo]:
    """Every tensor of the file by name: type, shape and data offset (no data read)."""
    return infos_of(read_gguf_metadata(Path(path)))


def infos_of(meta: GgufMetadata) -> dict[str, TensorInfo]:
    """:func:`tensor_infos` from a header already read."""
    return {name: TensorInfo(name, GGMLQuantizationType(meta.tensor_types[name]).name, tuple(int(d) for d in shape),
                             meta.tensor_offsets[name])
            for name, shape in meta.tensor_shapes.items()}


def tensor_bytes(path: Path, names: Iterable[str]) -> Iterator[tuple[TensorInfo, np.ndarray]]:
    """The tensors of ``names`` the file holds, each with its data as bytes shaped as gguf.quants.dequantize takes
    them (rows of its blocks' bytes, outer dimensions first): read-only views of the memory-mapped file."""
    infos = tensor_infos(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    for name in names:
        info = infos.get(name)
        if info is None:
            continue
        data = mapped[info.offset:info.offset + info.data_bytes]
        yield info, data.reshape(*reversed(info.shape[1:]), info.row_bytes)
