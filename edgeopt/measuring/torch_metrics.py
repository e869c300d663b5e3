"""Quality of a checkpoint against a reference, in torch: perplexity, KL divergence, top-1 agreement.

Used by the prune and distil passes to record what each step cost (the bundle-level evaluation of
an *exported* model lives in edgeopt/evaluation/causal_lm.py). KL is KL(reference || model), averaged per token:
how many nats of the original's next-token distribution the model fails to reproduce.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from edgeopt.measuring.metrics import Comparison, mean_nll


def load_causal_lm(model_dir: Path | str, dtype: torch.dtype = torch.float32) -> Any:
    from transformers import AutoModelForCausalLM

    from edgeopt.sources.model_spec import reference_attention

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, **reference_attention(model_dir)).eval()


@torch.no_grad()
def perplexity(model: Any, blocks: torch.Tensor, batch_size: int = 4) -> float:
    total_nll, total_tokens = 0.0, 0
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                reduction="sum")
        total_nll += nll.item()
        total_tokens += ids[:, 1:].numel()
    return math.exp(total_nll / total_tokens)


@torch.no_grad()
def compare_models(reference: Any, model: Any, blocks: torch.Tensor, prefix: str = "",
                   batch_size: int = 4) -> dict[str, float]:
    """{perplexity, reference_perplexity, kl_to_original, top1_agreement}, keys prefixed by ``prefix``.

    The arithmetic is edgeopt.measuring.metrics', the same that scores exported bundles.
    """
    quality = Comparison()
    reference_nll = 0.0
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size]
        ref = reference(input_ids=ids, use_cache=False).logits.float().numpy()
        out = model(input_ids=ids, use_cache=False).logits.float().numpy()
        for row_ref, row_out, row_ids in zip(ref, out, ids.tolist()):
            quality.add(row_ref[:-1], row_out[:-1], row_ids)
            nll, count = mean_nll(row_ref, row_ids)
            reference_nll += nll * count
    return {
        f"{prefix}perplexity": quality.perplexity,
        f"{prefix}reference_perplexity": math.exp(reference_nll / quality.nll_count),
        f"{prefix}kl_to_original": quality.mean_kl,
        f"{prefix}top1_agreement": quality.top1_agreement,
        f"{prefix}eval_tokens": float(quality.positions),
    }
