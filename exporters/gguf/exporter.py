"""``--format gguf``: convert the checkpoint, then quantize it with llama.cpp when asked."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError

from edgeopt.exporters import ExportResult, Exporter
from edgeopt.exporters.generated_text import self_calibrates
from edgeopt.exporters.gguf.calibration import calibration_refusal, export_imatrix, uses_imatrix
from edgeopt.exporters.gguf.mix.build import export_mix
from edgeopt.exporters.gguf.quant_types import MIX
from edgeopt.exporters.gguf.quant_report import summary_lines
from edgeopt.exporters.gguf.quantize import check_quant, quantize_gguf
from edgeopt.exporters.gguf.tokenizer_check import check_gguf_tokenizer
from edgeopt.exporters.gguf.unquantized import unquantized_gguf
from edgeopt.exporters.gguf.writer import UNQUANTIZED, convert_checkpoint

MODEL_FILE = "model.gguf"


class GGUFExporter(Exporter):
    format = "gguf"
    # 1: details record the tensor type mix and the quantizer's fallbacks; 2: calibration text becomes an
    # importance matrix (imatrix.gguf in the bundle), and the vocabulary is checked against tokenizer.json;
    # 3: without calibration text, types that use a matrix get one from text the model writes itself;
    # --quant MIX (per-tensor types by measured sensitivity); 4: the matrix is measured by llama.cpp on the
    # unquantized file (F16 unless the CPU computes BF16 natively), not by torch on the checkpoint
    cache_version = 4

    def calibration_refusal(self, quant: str) -> str | None:
        return calibration_refusal(quant)

    def check_options(self, quant: str, options: dict[str, Any]) -> None:
        if options.get("calibration_data") is not None and options.get("self_calibration") is False:
            raise ConfigError("--no-self-calibration with --calibration-data: the matrix comes from the given text, "
                              "so there is no self-written text to turn off", "drop --no-self-calibration")
        if quant == MIX and options.get("calibration_data") is None and not self_calibrates(options):
            raise ConfigError("--quant MIX measures what each tensor's type costs on calibration text, and there "
                              "is none: no --calibration-data and self-calibration is off",
                              "pass --calibration-data FILE (text like what the model will see)")

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        """Write ``out_dir/model.gguf``; ``options`` may carry ``threads`` and ``calibration_data`` (a text
        file the importance matrix is computed from, written beside the model as imatrix.gguf). Without it the
        matrix comes from text sampled from the model, unless ``self_calibration`` is False."""
        quant = quant.upper()
        calibrated = options.get("calibration_data") is not None
        refusal = calibration_refusal(quant) if calibrated else None
        if refusal:
            raise ConfigError(f"--calibration-data cannot be used here: {refusal}",
                              "drop --calibration-data, or choose a type that uses it (e.g. Q4_K_M, IQ4_XS)")
        self.check_options(quant, options)
        if quant != MIX:
            check_quant(quant, calibrated or (uses_imatrix(quant) and self_calibrates(options)))  # before any work
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / MODEL_FILE
        # Each GGUF is checked against the checkpoint's tokenizer before any further work (self-check).
        if quant in UNQUANTIZED:
            details = convert_checkpoint(Path(model_dir), target, quant)
            details |= check_gguf_tokenizer(target, Path(model_dir))
        else:
            # The unquantized file stays in the run's workbench (the evaluation's reference reads it); an export
            # run on its own keeps it in a directory of its own, removed after.
            with _workbench(out_dir, options.get("workbench")) as workbench:
                intermediate, details = unquantized_gguf(Path(model_dir), workbench)
                calibration = export_imatrix(Path(model_dir), intermediate, out_dir, quant, options)
                if quant == MIX:
                    assert calibration is not None  # check_options: MIX always has calibration text
                    details |= export_mix(Path(model_dir), intermediate, target, calibration, options)
                else:
                    details |= quantize_gguf(intermediate, target, quant, threads=int(options.get("threads", 2)),
                                             imatrix=calibration.matrix if calibration else None)
            if calibration is not None:
                details["imatrix"] = calibration.facts
        details["gguf_bytes"] = target.stat().st_size
        return ExportResult(model_file=MODEL_FILE, quant=quant, runtime=self.runtime, details=details)

    def summary(self, details: dict[str, Any]) -> list[str]:
        lines = []
        if details.get("imatrix"):
            facts = details["imatrix"]
            text = "text the model wrote itself" if facts.get("generated") else facts["source"]
            lines.append(f"importance matrix: {facts['tokens']} tokens of {text}, kept as {facts['file']}")
        if details.get("mix"):
            mix = details["mix"]
            lines.append(f"mix: types chosen for {len(mix['types'])} tensors to fit {mix['budget_bytes'] / 2**20:.1f} MiB "
                         f"(predicted KL {mix['predicted_kl']:.4g}; every group's measured KL in the manifest)")
        return lines + summary_lines(details)


@contextmanager
def _workbench(out_dir: Path, given: str | Path | None) -> Iterator[Path]:
    if given is not None:
        yield Path(given)
        return
    own = out_dir / ".edgeopt-workbench"
    own.mkdir(exist_ok=True)
    try:
        yield own
    finally:
        shutil.rmtree(own, ignore_errors=True)
