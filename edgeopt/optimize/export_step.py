"""The export step of the optimize pipeline: the chosen exporter run once per (format, parameters, input), its
output kept in the step cache (edgeopt.store.cache), and its summary reported."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt.store.bundle import content_hash
from edgeopt.store.cache import cached_step, step_key

if TYPE_CHECKING:  # imported when exporting (get_exporter): `edgeopt --help` loads no exporter package
    from edgeopt.exporters import Exporter


def export_in_cache(model_dir: Path, fmt: str, quant: str, options: dict[str, Any],
                    report: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """(the exported directory, what the exporter reported) of ``model_dir`` as ``fmt``:``quant``."""
    from edgeopt.exporters import get_exporter

    exporter = get_exporter(fmt)
    export_params = {"quant": quant, **options}
    input_hash = content_hash(model_dir)
    version = exporter.cache_version
    key_params = export_params if version is None else {**export_params, "exporter_version": version}
    key = step_key("export", fmt, key_params, input_hash)
    report(f"export: {fmt} {quant}")
    started = time.perf_counter()
    export_dir, export_meta, cached = cached_step(key, partial(run_exporter, exporter, model_dir, quant=quant,
                                                               params=export_params))
    report(f"export: {'reused cached output' if cached else f'done in {time.perf_counter() - started:.1f}s'}")
    for line in exporter.summary(export_meta):
        report(line)
    return export_dir, export_meta


def run_exporter(exporter: Exporter, model_dir: Path, out: Path, quant: str, params: dict[str, Any]) -> dict[str, Any]:
    """The exporter's result as the step cache keeps it."""
    result = exporter.export(model_dir, out, quant, params)
    return {"model_file": result.model_file, "runtime": result.runtime, "quant": result.quant, **result.details}
