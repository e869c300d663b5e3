"""Build torch bundles from the tiny checkpoints through the real pipeline (export + manifest + tokenizer)."""

from __future__ import annotations

from pathlib import Path

from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize


def make_torch_bundle(model_dir: Path, out: Path, quant: str = "fp32") -> Path:
    run_optimize(OptimizeOptions(model=str(model_dir), target="host", output=out, format="torch", quant=quant,
                                 evaluate=False, context=256), report=lambda _msg: None)
    return out


def reference_logits(model_dir: Path, token_ids: list[int]):
    """transformers' own forward over the whole sequence: logits at every position, float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        return model(torch.tensor([token_ids])).logits[0].numpy()
