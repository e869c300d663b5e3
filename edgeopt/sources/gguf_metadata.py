"""A GGUF file's key-value metadata, read without parsing its vocabulary.

Serving a GGUF file needs a dozen scalars (architecture, layers, KV heads, context, feed-forward width,
file type) and one long string (the chat template). They sit in the header between arrays that dwarf
them: ``tokenizer.ggml.tokens`` (262k strings for Gemma 3), ``merges``, ``scores``. The ``gguf`` library
turns each element into a numpy object (tens of seconds for a big vocabulary), so this reader walks
the header itself: scalars and strings are decoded, numeric arrays are skipped by size, string arrays
by hopping over each element's length prefix (a few hundred ms for 262k tokens), and only their element
count and position are kept so that one element can be looked up later (:meth:`GgufMetadata.array_string`).

Format (GGUF v2/v3, little-endian): magic ``GGUF``, u32 version, u64 tensor count, u64 key count, then
per key: string key, u32 value type, value. A string is a u64 byte length and its UTF-8 bytes; an array
is a u32 element type, a u64 count and the elements.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.errors import BundleError

GGUF_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# value type -> struct format of one element (strings and arrays are walked, not unpacked)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

# llama_ftype enum values (llama.h): general.file_type -> the quant name edgeopt and llama.cpp's tools use.
FTYPE_IDS = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17,
    "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21, "IQ3_XS": 22, "IQ3_XXS": 23, "IQ1_S": 24,
    "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "IQ2_S": 28, "IQ2_M": 29, "IQ4_XS": 30, "IQ1_M": 31,
    "BF16": 32, "TQ1_0": 36, "TQ2_0": 37,
}
FTYPE_NAMES = {number: name for name, number in FTYPE_IDS.items()}


@dataclass(frozen=True)
class ArrayInfo:
    element_type: int
    count: int
    offset: int  # where the first element starts in the file
    longest: int = 0  # a string array's longest element, in bytes (seen while hopping over them; 0 for numbers)


@dataclass(frozen=True)
class GgufMetadata:
    path: Path
    version: int
    tensor_count: int
    values: dict[str, Any]  # scalars and strings, decoded
    arrays: dict[str, ArrayInfo]  # arrays: their element type, length and position only
    tensor_shapes: dict[str, tuple[int, ...]]  # tensor name -> dimensions (the infos after the metadata)
    tensor_types: dict[str, int]  # tensor name -> its ggml type id (gguf.GGMLQuantizationType's values)
    tensor_offsets: dict[str, int]  # tensor name -> where its data starts in the file
    data_end: int  # the file's length: where the last tensor's data (and its padding) ends
    tensor_infos_offset: int  # where the tensor infos start (the metadata ends)

    @property
    def parameter_count(self) -> int:
        """Weights the file holds (a tied output matrix is counted once: it is one tensor)."""
        total = 0
        for shape in self.tensor_shapes.values():
            count = 1
            for dim in shape:
                count *= dim
            total += count
        return total

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def architecture(self) -> str:
        arch = self.values.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise BundleError(f"{self.path} has no general.architecture in its metadata",
                              "it is not a model GGUF (a vocabulary-only file?); convert the model with llama.cpp")
        return arch

    def arch_value(self, name: str, default: Any = None) -> Any:
        """``{architecture}.{name}``, e.g. ``arch_value("block_count")``."""
        return self.values.get(f"{self.architecture}.{name}", default)

    @property
    def file_type(self) -> str:
        """The quant name of ``general.file_type`` (``"Q8_0"``); ``"unknown"`` when absent or new."""
        number = self.values.get("general.file_type")
        return FTYPE_NAMES.get(number, "unknown") if isinstance(number, int) else "unknown"

    def array_length(self, key: str) -> int:
        info = self.arrays.get(key)
        return info.count if info else 0

    def array_numbers(self, key: str) -> list[Any]:
        """A numeric array's elements (per-layer values such as head counts; never the vocabulary's)."""
        info = self.arrays.get(key)
        if info is None or info.element_type not in _SCALARS:
            return []
        fmt = _SCALARS[info.element_type]
        with _mapped(self.path) as data:
            return list(struct.unpack_from(f"<{info.count}{fmt[1]}", data, info.offset))

    def array_string(self, key: str, index: int) -> str | None:
        """Element ``index`` of a string array (e.g. the text of one token), None when out of range."""
        info = self.arrays.get(key)
        if info is None or info.element_type != _STRING or not 0 <= index < info.count:
            return None
        with _mapped(self.path) as data:
            offset = info.offset
            for _ in range(index):
                offset += 8 + struct.unpack_from("<Q", data, offset)[0]
            size = struct.unpack_from("<Q", data, offset)[0]
            return bytes(data[offset + 8:offset + 8 + size]).decode("utf-8", errors="replace")


def is_gguf_file(path: Path) -> bool:
    """A regular file that starts with the GGUF magic."""
    path = Path(path)
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC


def read_gguf_metadata(path: Path) -> GgufMetadata:
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"GGUF file {path} does not exist", "pass the path of a .gguf model file")
    with _mapped(path) as data:
        try:
            return _parse(path, data)
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise BundleError(f"{path} has a truncated or corrupt GGUF header ({exc})",
                              "download or convert the file again") from exc


class _mapped:
    """The file memory-mapped read-only (the header is read in place, never copied whole)."""

    def __init__(self, path: Path) -> None:
        self._fh = path.open("rb")
        self._map: mmap.mmap | None = None

    def __enter__(self) -> mmap.mmap:
        try:
            self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file cannot be mapped
            self._fh.close()
            raise BundleError(f"{self._fh.name} is empty", "download or convert the file again") from exc
        return self._map

    def __exit__(self, *_: object) -> None:
        if self._map is not None:
            self._map.close()
        self._fh.close()


def _parse(path: Path, data: mmap.mmap) -> GgufMetadata:
    if data[:4] != GGUF_MAGIC:
        raise BundleError(f"{path} is not a GGUF file (it starts with {bytes(data[:4])!r}, not b'GGUF')",
                          "pass a .gguf model file, or a bundle directory written by edgeopt")
    version, tensor_count, key_count = struct.unpack_from("<IQQ", data, 4)
    if version < 2:
        raise BundleError(f"{path} is GGUF version {version}; llama.cpp reads version 2 and later",
                          "convert the model again with a current llama.cpp")
    offset = 24
    values: dict[str, Any] = {}
    arrays: dict[str, ArrayInfo] = {}
    for _ in range(key_count):
        key, offset = _string(data, offset)
        (value_type,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if value_type == _ARRAY:
            element_type, count = struct.unpack_from("<IQ", data, offset)
            offset += 12
            end, longest = _skip_array(data, offset, element_type, count, key)
            arrays[key] = ArrayInfo(element_type, count, offset, longest)
            offset = end
        elif value_type == _STRING:
            values[key], offset = _string(data, offset)
        elif value_type in _SCALARS:
            fmt = _SCALARS[value_type]
            (values[key],) = struct.unpack_from(fmt, data, offset)
            offset += struct.calcsize(fmt)
        else:
            raise BundleError(f"{path}: metadata key {key!r} has unknown value type {value_type}",
                              "the file is corrupt or newer than this reader; convert it again")
    infos_offset = offset
    shapes, types, relative, offset = _tensor_infos(data, offset, tensor_count)
    alignment = int(values.get("general.alignment", 32))
    data_start = (offset + alignment - 1) // alignment * alignment  # tensor data offsets count from here
    starts = {name: data_start + start for name, start in relative.items()}
    return GgufMetadata(path, version, tensor_count, values, arrays, shapes, types, starts, len(data), infos_offset)


def read_tensor_bytes(path: Path) -> dict[str, int]:
    """Bytes of each tensor's data in the file (its alignment padding included), from the data offsets of
    the tensor infos: what llama.cpp allocates for it on whichever device holds it."""
    meta = read_gguf_metadata(path)
    ordered = sorted(meta.tensor_offsets.items(), key=lambda item: item[1])
    ends = [start for _, start in ordered[1:]] + [meta.data_end]
    return {name: stop - start for (name, start), stop in zip(ordered, ends)}


def _tensor_infos(data: mmap.mmap, offset: int, count: int) -> tuple[dict[str, tuple[int, ...]], dict[str, int],
                                                                    dict[str, int], int]:
    """Each tensor info: name, u32 dimension count, u64 dimensions, u32 type, u64 data offset (from the
    aligned end of the infos). Returns shapes, types, those offsets, and where the infos end."""
    shapes, types, starts = {}, {}, {}
    for _ in range(count):
        name, offset = _string(data, offset)
        (n_dims,) = struct.unpack_from("<I", data, offset)
        shapes[name] = struct.unpack_from(f"<{n_dims}Q", data, offset + 4)
        types[name], starts[name] = struct.unpack_from("<IQ", data, offset + 4 + 8 * n_dims)
        offset += 4 + 8 * n_dims + 4 + 8
    return shapes, types, starts, offset


def _string(data: mmap.mmap, offset: int) -> tuple[str, int]:
    (size,) = struct.unpack_from("<Q", data, offset)
    end = offset + 8 + size
    if end > len(data):
        raise IndexError(f"a string of {size} bytes runs past the end of the file")
    return bytes(data[offset + 8:end]).decode("utf-8"), end


def _skip_array(data: mmap.mmap, offset: int, element_type: int, count: int, key: str) -> tuple[int, int]:
    """Where the array ends, and its longest element's bytes when it holds strings (else 0)."""
    if element_type in _SCALARS:
        return offset + count * struct.calcsize(_SCALARS[element_type]), 0
    if element_type == _STRING:
        unpack = struct.Struct("<Q").unpack_from
        longest = 0
        for _ in range(count):  # each element's length says where the next one starts
            (size,) = unpack(data, offset)
            offset += 8 + size
            if size > longest:
                longest = size
        return offset, longest
    raise BundleError(f"metadata array {key!r} holds element type {element_type}, which this reader cannot skip",
                      "convert the model again with a current llama.cpp")
