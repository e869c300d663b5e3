"""Exporters: one package per file format, named by the format's entry in :mod:`edgeopt.backends`.

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
    """Base class; subclasses register themselves by ``format`` name. The options an exporter reads are
    declared by its format's entry (``ExportSpec.options``), so they are checked without importing it."""

    format: ClassVar[str]
    # Set or bump when the exporter's output changes, so cached exports made by older code are not reused
    # (None keeps the cache keys of exporters that never changed).
    cache_version: ClassVar[int | None] = None
    registry: ClassVar[dict[str, type[Exporter]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "format", None):
            Exporter.registry[cls.format] = cls

    @property
    def quants(self) -> tuple[str, ...]:
        """The quants this format writes: its entry's quant table (what the planner sizes)."""
        from edgeopt import backends

        return backends.backend(self.format).quants.names

    @property
    def runtime(self) -> str:
        """The runtime that serves this format: its backend entry's (edgeopt.backends)."""
        from edgeopt import backends

        return backends.backend(self.format).runtime

    def calibration_refusal(self, quant: str) -> str | None:
        """Why ``quant`` of this format cannot use ``--calibration-data``, or None when it uses it. The
        pipeline refuses the option with this reason before any work: an accepted flag is never ignored."""
        return f"the {self.format} exporter does not use calibration data"

    def check_options(self, quant: str, options: dict[str, Any]) -> None:
        """Raise ConfigError, before any work, when ``options`` cannot make ``quant`` (one missing, say)."""

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        raise NotImplementedError

    def summary(self, details: dict[str, Any]) -> list[str]:
        """A few lines for the user about what ``export`` made (its ``details``, possibly from the cache):
        where the full record, in the manifest, is too long to print."""
        return []


def get_exporter(fmt: str) -> Exporter:
    """Import the exporter module of ``fmt``'s backend entry lazily and return an instance."""
    from edgeopt import backends

    module = backends.backend(fmt).export.exporter_module
    try:
        backends.load_attr(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ConfigError(f"format {fmt!r} is not available in this build", "use --format gguf") from exc
        raise
    if fmt not in Exporter.registry:
        raise ConfigError(f"{module} defines no Exporter with format {fmt!r}",
                          "its Exporter subclass must set `format` to the backend entry's format")
    return Exporter.registry[fmt]()
