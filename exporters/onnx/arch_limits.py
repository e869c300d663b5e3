"""Checkpoints the ONNX export cannot represent faithfully, refused before optimum runs.

optimum exports by tracing one forward pass, so anything transformers decides with a Python
condition on the input is frozen into the graph as whichever branch the trace took.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import UnsupportedArchitectureError

LONGROPE_KINDS = ("longrope", "su")


def check_onnx_exportable(model_dir: Path, config: dict[str, Any]) -> None:
    """Raise naming the architecture and the reason when the traced graph would compute other logits."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind in LONGROPE_KINDS:
        arch = (config.get("architectures") or [config.get("model_type")])[0]
        original = config.get("original_max_position_embeddings") or config.get("max_position_embeddings")
        raise UnsupportedArchitectureError(
            f"{arch} with LongRoPE ({model_dir}) cannot be exported to ONNX: transformers switches between its "
            f"short and long rope factors with a Python test of the sequence length against {original} tokens, "
            "which the ONNX trace freezes into one branch, so the graph computes wrong logits on the other side "
            f"of {original} tokens (measured on a tiny Phi-3.5: mean KL ~2 against transformers past the window)",
            "use --format gguf: llama.cpp applies LongRoPE's short and long factors itself")
