"""The format registry: one entry per bundle format says everything the rest of edgeopt needs about it.

Planner, pipeline, evaluation, profiles and the server look a format up here instead of keeping their own
table. An entry (:class:`edgeopt.formats.entry.Backend`) lives in its format's own package, beside the facts
it declares (quant table with weight bits, memory model, export options); this module only lists the
built-in ones, :data:`BUILT_IN`, one line each, and looks them up. Adding a format is its package plus one
line there, or :func:`register` from a plugin or a test (tests/fourth_format).

Dependency-free on purpose: entries name code as ``"module:attr"`` strings, and :func:`load_attr` imports one
only when a caller needs it, so reading the registry never pulls in llama.cpp, onnxruntime, torch or the
exporters (the serving path reads it too).
"""

from __future__ import annotations

import importlib
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.formats.entry import Backend
from edgeopt.formats.gguf.entry import ENTRY as GGUF
from edgeopt.formats.onnx.entry import ENTRY as ONNX
from edgeopt.formats.torch.entry import ENTRY as TORCH

__all__ = ["BUILT_IN", "MIB", "Backend", "backend", "backend_for_runtime", "formats", "load_attr", "register",
           "runtimes", "unregister"]

MIB = 1024**2

# The built-in formats, one registration each, in the order plan lists them.
BUILT_IN: tuple[Backend, ...] = (
    GGUF,
    ONNX,
    TORCH,
)
_REGISTRY: dict[str, Backend] = {entry.format: entry for entry in BUILT_IN}


def formats() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def runtimes() -> tuple[str, ...]:
    return tuple(dict.fromkeys(entry.runtime for entry in _REGISTRY.values()))


def backend(fmt: str) -> Backend:
    """The entry of format ``fmt``; an unknown name is refused with the valid ones."""
    entry = _REGISTRY.get(fmt)
    if entry is None:
        raise ConfigError(f"unknown format {fmt!r}", f"valid formats: {', '.join(_REGISTRY)}")
    return entry


def backend_for_runtime(runtime: str) -> Backend:
    """The entry whose bundles ``runtime`` serves; an unknown runtime is refused with the valid ones."""
    entry = next((e for e in _REGISTRY.values() if e.runtime == runtime), None)
    if entry is None:
        raise ConfigError(f"unknown runtime {runtime!r}", f"valid runtimes: {', '.join(runtimes())}")
    return entry


def register(entry: Backend) -> None:
    """Add (or replace) a format: how a plugin, or a test, adds a fourth backend."""
    _REGISTRY[entry.format] = entry


def unregister(fmt: str) -> None:
    """Remove a format added with :func:`register` (built-in formats stay)."""
    if fmt in {entry.format for entry in BUILT_IN}:
        raise ConfigError(f"format {fmt!r} is built in and cannot be removed", "unregister only what you registered")
    _REGISTRY.pop(fmt, None)


def load_attr(target: str) -> Any:
    """Import ``"module:attr"`` (or a bare ``"module"``) named by an entry, only now that it is needed."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module
