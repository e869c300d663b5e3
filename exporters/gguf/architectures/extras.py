"""What one architecture adds to the GGUF conversion beyond the Llama layout every family shares.

Each family with quirks has its own small module (``phi3``, ``granite``, ... in this package) exposing an
``EXTRAS`` instance; the writer, the metadata and the tensor naming ask :func:`extras_for` instead of
testing architecture names. Modules are imported lazily, only when that architecture is converted.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.sources.model_spec import ModelSpec

Config = dict[str, Any]


def _nothing(*_args: Any) -> None:
    return None


def _no_tensors(_spec: ModelSpec, _config: Config) -> list[tuple[str, np.ndarray]]:
    return []


@dataclass(frozen=True)
class ArchExtras:
    # llama.cpp runs the family with "normal" rope (adjacent dimension pairs), so the q/k rows of
    # Hugging Face's half-split layout are reordered; NeoX-rope families (Qwen, Phi-3) are copied as is.
    rope_pairs_interleaved: bool = False
    layer_names: Mapping[str, str] = field(default_factory=dict)  # HF suffix -> GGUF suffix, beyond Llama's
    rope_scaling_kinds: tuple[str, ...] = ()  # rope scaling types add_metadata writes itself
    check: Callable[[ModelSpec, Config], None] = _nothing  # refuse what llama.cpp's graph cannot express
    add_metadata: Callable[[Any, ModelSpec, Config], None] = _nothing  # family keys (``{arch}.*``)
    extra_tensors: Callable[[ModelSpec, Config], list[tuple[str, np.ndarray]]] = _no_tensors
    # (HF tensor name, spec, config) -> the array transform that tensor needs, or None (Gemma's norm +1).
    tensor_transform: Callable[[str, ModelSpec, Config], Callable[[np.ndarray], np.ndarray] | None] = _nothing


_PLAIN = ArchExtras()
_MODULES = {
    "phi3": "edgeopt.exporters.gguf.architectures.phi3",
    "granite": "edgeopt.exporters.gguf.architectures.granite",
    "smollm3": "edgeopt.exporters.gguf.architectures.smollm3",
    "gemma2": "edgeopt.exporters.gguf.architectures.gemma",
    "gemma3": "edgeopt.exporters.gguf.architectures.gemma",
}
_INLINE = {"llama": ArchExtras(rope_pairs_interleaved=True)}


def extras_for(arch: str) -> ArchExtras:
    """The conversion additions of GGUF architecture ``arch`` (plain Llama layout when it has none)."""
    if arch in _MODULES:
        return importlib.import_module(_MODULES[arch]).EXTRAS
    return _INLINE.get(arch, _PLAIN)
