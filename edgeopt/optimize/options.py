"""What ``edgeopt optimize`` is asked (:class:`OptimizeOptions`) and what it will do, decided before any work
(:func:`resolve`): the plan (edgeopt.planning: format, quant, KV type, pass list), then the two checks that
are the pipeline's own: the export flags against the chosen exporter, and the output directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeopt import backends
from edgeopt.byte_sizes import Size
from edgeopt.errors import ConfigError, OutputExistsError
from edgeopt.optimize.export_options import check_export_options
from edgeopt.planning import (CheckpointSource, Compression, OptimizePlan, OptimizeRequest, WorkshopRequest,
                              plan_for)


@dataclass
class OptimizeOptions:
    model: str
    target: str = "host"
    output: Path | None = None
    format: str | None = None
    quant: str | None = None
    kv_type: str | None = None  # llama.cpp KV cache type (gguf only); None: the planner's rule
    context: int | None = None
    concurrency: int = 1
    compression: Compression = field(default_factory=Compression)  # --prune*, --distil*: the planner makes the passes
    export_options: dict[str, Any] = field(default_factory=dict)
    eval_data: Path | None = None
    evaluate: bool = True
    force: bool = False
    dry_run: bool = False
    fit: bool = False  # prune just enough to fit the target when the model does not (edgeopt.planning)
    accept_quality_loss: bool = False  # write a bundle under the quality floor (edgeopt/evaluation/quality_floor.py)
    ignore_fit: bool = False  # write a candidate the plan marks as not fitting the target
    size: Size | None = None  # --size as written (its bytes are export_options' mix_size_bytes)
    # optimize --draft-for: the bundle is a draft model for ``model`` (the planner's draft recipe makes the passes);
    # it is measured by how often ``model`` accepts its tokens (edgeopt.evaluation.draft), not by the quality floor
    draft: bool = False

    def written_size(self) -> Size | None:
        """--size as written, or the mix size a caller set in the export options alone."""
        size_bytes = self.export_options.get("mix_size_bytes")
        if self.size is not None or size_bytes is None:
            return self.size
        return Size(f"{size_bytes}B", size_bytes, bare=False)

    def plan_request(self) -> OptimizeRequest:
        return OptimizeRequest(format=self.format, quant=self.quant, kv_type=self.kv_type, context=self.context,
                               concurrency=self.concurrency, compression=self.compression, fit=self.fit,
                               draft=self.draft, size=self.written_size(), ignore_fit=self.ignore_fit,
                               dry_run=self.dry_run, output=self.output, workshop=self.workshop_request())

    def workshop_request(self) -> WorkshopRequest:
        """The steps the flags ask for, on this workstation as measured now."""
        from edgeopt.exporters.onnx.exporter import CALIBRATED_ALGORITHMS, int4_algorithm
        from edgeopt.profiles.workstation import measure_workstation

        text = self.export_options.get("calibration_data")
        return WorkshopRequest(measure_workstation(), evaluate=self.evaluate,
                               calibration_text_bytes=Path(text).stat().st_size if text and Path(text).is_file() else None,
                               self_calibration=bool(self.export_options.get("self_calibration", True)),
                               int4_calibration=int4_algorithm(self.export_options) in CALIBRATED_ALGORITHMS)


def resolve(opts: OptimizeOptions) -> OptimizePlan:
    if opts.accept_quality_loss and not opts.evaluate:
        raise ConfigError("--accept-quality-loss with --no-eval: without an evaluation there is no loss to accept",
                          "drop --no-eval (the quality floor is checked on the evaluation), or drop --accept-quality-loss")
    planned = plan_for(CheckpointSource(opts.model), opts.target, opts.plan_request())
    check_export_options(planned.format, planned.quant, opts.export_options)
    if planned.output.exists() and not opts.force and not opts.dry_run:
        raise OutputExistsError(f"output directory {planned.output} already exists",
                                "pass --force to replace it, or choose -o")
    return planned


def check_format(fmt: str | None) -> None:
    if fmt is not None:
        backends.backend(fmt)  # refuses an unknown name with the valid ones
