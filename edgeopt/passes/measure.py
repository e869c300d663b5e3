"""Quality of a checkpoint against a reference, in torch: perplexity, KL divergence, top-1 agreement.

Used by the prune and distil passes to record what each step cost (the bundle-level evaluation of
an *exported* model lives in edgeopt/evaluate.py). KL is KL(reference || model), averaged per token:
how many nats of the original's next-token distribution the model fails to reproduce.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch


def load_causal_lm(model_dir: Path | str, dtype: torch.dtype = torch.float32) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).eval()


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
    """{perplexity, reference_perplexity, kl_to_original, top1_agreement}, keys prefixed by ``prefix``."""
    nll_model = nll_ref = kl_sum = agree = 0.0
    tokens = 0
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size]
        ref = reference(input_ids=ids, use_cache=False).logits[:, :-1].float()
        out = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        targets = ids[:, 1:]
        ref_logp, out_logp = ref.log_softmax(-1), out.log_softmax(-1)
        nll_ref -= ref_logp.gather(-1, targets[..., None]).sum().item()
        nll_model -= out_logp.gather(-1, targets[..., None]).sum().item()
        kl_sum += (ref_logp.exp() * (ref_logp - out_logp)).sum().item()
        agree += (ref.argmax(-1) == out.argmax(-1)).sum().item()
        tokens += targets.numel()
    return {
        f"{prefix}perplexity": math.exp(nll_model / tokens),
        f"{prefix}reference_perplexity": math.exp(nll_ref / tokens),
        f"{prefix}kl_to_original": kl_sum / tokens,
        f"{prefix}top1_agreement": agree / tokens,
        f"{prefix}eval_tokens": float(tokens),
    }
