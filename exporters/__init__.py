"""Exporters: one package per file format, registered by name.

An exporter turns a Hugging Face checkpoint directory into the model files of a bundle. Each one
declares its formats' quantizations and a *size estimate* that the planner uses before any work is
done; heavy libraries (torch, onnx, llama.cpp) are imported inside ``export`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from edgeopt.errors import ConfigError


@dataclass
class ExportResult:
    """What an exporter wrote: files relative to the bundle, and facts for the manifest."""

    model_file: str  # the file (or directory) a runtime loads, relative to the bundle root
    quant: str
    runtime: str
    details: dict[str, Any] = field(default_factory=dict)


class Exporter:
    """Base class; subclasses register themselves by ``format`` name."""

    format: ClassVar[str]
    quants: ClassVar[tuple[str, ...]]
    default_runtime: ClassVar[str]
    # Set or bump when the exporter's output changes, so cached exports made by older code are not reused
    # (None keeps the cache keys of exporters that never changed).
    cache_version: ClassVar[int | None] = None
    registry: ClassVar[dict[str, type[Exporter]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "format", None):
            Exporter.registry[cls.format] = cls

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        raise NotImplementedError


def get_exporter(fmt: str) -> Exporter:
    """Import the exporter module for ``fmt`` lazily and return an instance."""
    import importlib

    modules = {"gguf": "exporters.gguf.exporter", "onnx": "exporters.onnx.exporter", "torch": "exporters.torch_export"}
    if fmt not in modules:
        raise ConfigError(f"unknown format {fmt!r}", f"valid formats: {', '.join(modules)}")
    try:
        importlib.import_module(modules[fmt])
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(("exporters.",)):
            raise ConfigError(f"format {fmt!r} is not available in this build", "use --format gguf") from exc
        raise
    return Exporter.registry[fmt]()
