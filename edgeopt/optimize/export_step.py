"""The export step's work, as the step cache (edgeopt.store.cache) runs it on a miss: the exporter writes its
files, and what it reports becomes the cached step's record."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when exporting (get_exporter): `edgeopt --help` loads no exporter package
    from edgeopt.exporters import Exporter


def run_exporter(exporter: Exporter, model_dir: Path, out: Path, quant: str, params: dict[str, Any]) -> dict[str, Any]:
    """The exporter's result as the step cache keeps it."""
    result = exporter.export(model_dir, out, quant, params)
    return {"model_file": result.model_file, "runtime": result.runtime, "quant": result.quant, **result.details}
