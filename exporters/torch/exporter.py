"""``--format torch``: the (pruned, distilled) Hugging Face checkpoint itself, as safetensors in one dtype.

The bundle's ``model/`` directory is a plain ``save_pretrained`` checkpoint (config.json,
generation_config.json, model.safetensors), so ``edgeopt.runtimes.torch`` and any transformers tool can load
it. The dtype is the "quant": bf16/fp16 for CUDA targets (the planner's default there), fp32 for CPU
targets, where half-precision matmuls are slow or missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError, MissingDependencyError
from edgeopt.exporters import Exporter, ExportResult

DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
MODEL_DIR = "model"


class TorchExporter(Exporter):
    format = "torch"

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        if quant not in self.quants:
            raise ExportError(f"torch export has no dtype {quant!r}", f"use --quant {', '.join(self.quants)}")
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise MissingDependencyError(f"--format torch needs torch and transformers ({exc.name} is missing)",
                                         "pip install 'edgeopt[optimize]'") from exc
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, DTYPE_NAMES[quant]))
        except (OSError, ValueError) as exc:
            raise ExportError(f"cannot load the checkpoint in {model_dir}: {exc}",
                              "pass a Hugging Face causal-LM checkpoint directory") from exc
        target = out_dir / MODEL_DIR
        model.save_pretrained(target, safe_serialization=True)
        weight_bytes = sum(p.stat().st_size for p in target.glob("*.safetensors"))
        return ExportResult(model_file=MODEL_DIR, quant=quant, runtime=self.runtime, details={
            "dtype": DTYPE_NAMES[quant],
            "weights_bytes": weight_bytes,
            "num_parameters": sum(p.numel() for p in model.parameters()),
        })
