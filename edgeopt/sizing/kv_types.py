"""KV cache element types: the one table of how many bytes a cached key or value element takes, and the
``--kv-type`` a bundle is served with.

A format's backend entry (edgeopt.backends) lists the types its runtime can be asked for
(``kv_cache_types``, the first its default); sizing (edgeopt.sizing.budget.size_kv) takes the element
size this module gives for the chosen one. llama.cpp stores its cache as f16 by default and can store it
block-quantized (``type_k``/``type_v``): ``q8_0`` keeps 32 elements in 34 bytes (32 int8 + one f16
scale), ``q4_0`` 32 elements in 18 bytes (16 bytes of nibbles + one f16 scale), i.e. 1.0625 and 0.5625
bytes per element against f16's 2: 1.88x and 3.56x the tokens in the same memory. Blocks run along each
head's row, so a quantized type needs every head dimension to be a multiple of 32 (llama.cpp refuses the
context otherwise), and llama.cpp reads a quantized V cache only through flash attention
(runtimes/llama_cpp/kv_type.py). ONNX Runtime and torch keep one fixed KV dtype: no ``--kv-type``.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeopt import backends
from edgeopt.errors import ConfigError


@dataclass(frozen=True)
class KvType:
    name: str
    block_elements: int  # elements quantized together (1: a plain float type)
    block_bytes: int  # bytes one block takes

    @property
    def element_bytes(self) -> float:
        """Bytes per element; exact in binary floating point for every type here (2, 17/16, 9/16)."""
        return self.block_bytes / self.block_elements

    @property
    def quantized(self) -> bool:
        return self.block_elements > 1


# f32 is never served (twice f16's memory for no quality a user could measure): the evaluation's reference
# decodes its text with it, so that the logits it keeps are the weights', not a cache's rounding.
REFERENCE_KV_TYPE = "f32"
KV_TYPES: dict[str, KvType] = {kv.name: kv for kv in (KvType("f16", 1, 2), KvType("q8_0", 32, 34),
                                                      KvType("q4_0", 32, 18), KvType(REFERENCE_KV_TYPE, 1, 4))}


def selectable_kv_types() -> tuple[str, ...]:
    """Every KV type some format's runtime can be asked for (--kv-type, a profile's tight_memory_kv_type)."""
    return tuple(dict.fromkeys(t for fmt in backends.formats() for t in backends.backend(fmt).serving.kv_cache_types))


def kv_element_bytes(kv_type: str) -> float:
    """Bytes per KV element of ``kv_type``: the element size :func:`edgeopt.sizing.budget.size_kv` takes."""
    return KV_TYPES[kv_type].element_bytes


def kv_element_bytes_for(fmt: str, quant: str, kv_type: str | None) -> float:
    """Bytes per cached element of a ``fmt``:``quant`` bundle served with ``kv_type`` (None: the format's own)."""
    return kv_element_bytes(kv_type) if kv_type else backends.backend(fmt).kv_element_bytes_for(quant)


def parse_kv_type(text: str, fmt: str, option: str = "--kv-type") -> str:
    """The canonical name of a KV type asked for on a ``fmt`` bundle; an unknown name, or any type on a
    format whose runtime keeps one fixed KV dtype (ONNX, torch), is refused with the reason."""
    name = text.strip().lower()
    valid = selectable_kv_types()
    if name not in KV_TYPES or name not in valid:
        raise ConfigError(f"unknown KV cache type {option} {text!r}", f"valid: {', '.join(valid)}")
    entry = backends.backend(fmt)
    if name not in entry.serving.kv_cache_types:
        which = [f for f in backends.formats() if name in backends.backend(f).serving.kv_cache_types]
        raise ConfigError(
            f"{option} {name} applies to {' and '.join(which)} bundles only; {fmt} bundles run on {entry.runtime}, "
            "which keeps its KV cache in one fixed dtype",
            f"drop {option}, or export with --format {which[0]} to quantize the KV cache")
    return name


def check_head_dims(kv_type: str, head_dim_k: int, head_dim_v: int, model: str) -> None:
    """A quantized KV type needs head dimensions that are whole blocks (llama.cpp quantizes per head row)."""
    if not head_dims_fit(kv_type, head_dim_k, head_dim_v):
        block = KV_TYPES[kv_type].block_elements
        bad = [f"{which} head dim {dim}" for which, dim in (("key", head_dim_k), ("value", head_dim_v)) if dim % block]
        raise ConfigError(f"KV cache type {kv_type} stores {block}-element blocks, but {model} has "
                          f"{' and '.join(bad)} (not a multiple of {block})", "use --kv-type f16 for this model")


def head_dims_fit(kv_type: str, head_dim_k: int, head_dim_v: int) -> bool:
    block = KV_TYPES[kv_type].block_elements
    return head_dim_k % block == 0 and head_dim_v % block == 0
