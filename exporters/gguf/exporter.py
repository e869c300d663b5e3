"""``--format gguf``: convert the checkpoint, then quantize it with llama.cpp when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporters import ExportResult, Exporter
from exporters.gguf.quant_types import FILE_TYPES
from exporters.gguf.quant_report import summary_lines
from exporters.gguf.quantize import check_quant, quantize_gguf
from exporters.gguf.writer import UNQUANTIZED, convert_checkpoint

MODEL_FILE = "model.gguf"


def _intermediate_type(model_dir: Path) -> str:
    """The unquantized type handed to the quantizer: BF16 for bf16 checkpoints (F16 could overflow)."""
    from exporters.gguf.safetensors_reader import SafetensorsCheckpoint

    return "BF16" if "BF16" in SafetensorsCheckpoint(model_dir).dtypes else "F16"


class GGUFExporter(Exporter):
    format = "gguf"
    quants = tuple(FILE_TYPES)
    cache_version = 1  # 1: details record the tensor type mix and the quantizer's fallbacks

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        """Write ``out_dir/model.gguf``; ``options`` may carry ``threads`` and (later) ``imatrix``."""
        quant = quant.upper()
        check_quant(quant, options.get("imatrix"))  # reject before any work
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / MODEL_FILE
        if quant in UNQUANTIZED:
            details = convert_checkpoint(Path(model_dir), target, quant)
        else:
            intermediate = out_dir / ".edgeopt-unquantized.gguf"
            try:
                details = convert_checkpoint(Path(model_dir), intermediate, _intermediate_type(Path(model_dir)))
                details |= quantize_gguf(intermediate, target, quant, threads=int(options.get("threads", 2)),
                                         imatrix=options.get("imatrix"))
            finally:
                intermediate.unlink(missing_ok=True)
        details["gguf_bytes"] = target.stat().st_size
        return ExportResult(model_file=MODEL_FILE, quant=quant, runtime=self.runtime, details=details)

    def summary(self, details: dict[str, Any]) -> list[str]:
        return summary_lines(details)
