"""Quality figures for the demo model: perplexity on held-out text and a unigram baseline.

Both score exactly the same target tokens (every token of each eval window except its first), so
the two perplexities are directly comparable.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from edgeopt.errors import EvaluationError

if TYPE_CHECKING:
    import torch


def eval_windows(eval_ids: "torch.Tensor", seq_len: int) -> "torch.Tensor":
    """Non-overlapping (n, seq_len) windows covering eval_ids; a short tail is dropped."""
    count = len(eval_ids) // seq_len
    if count == 0:
        raise EvaluationError(f"eval text has {len(eval_ids)} tokens, fewer than one window of {seq_len}",
                              "use a longer eval text or a smaller seq_len")
    return eval_ids[: count * seq_len].view(count, seq_len)


def model_perplexity(model, eval_ids: "torch.Tensor", seq_len: int, batch_size: int = 16) -> float:
    """exp(mean next-token NLL) of ``model`` over the eval windows."""
    import torch
    import torch.nn.functional as F

    windows = eval_windows(eval_ids, seq_len)
    total_nll, total_tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            batch = windows[start: start + batch_size]
            logits = model(input_ids=batch).logits[:, :-1]
            targets = batch[:, 1:]
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="sum")
            total_nll += nll.item()
            total_tokens += targets.numel()
    return math.exp(total_nll / total_tokens)


def unigram_perplexity(train_ids: "torch.Tensor", eval_ids: "torch.Tensor", vocab_size: int, seq_len: int) -> float:
    """Perplexity of add-one-smoothed training token frequencies: the bar any real LM must clear."""
    import torch

    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_probs = torch.log(counts / counts.sum())
    targets = eval_windows(eval_ids, seq_len)[:, 1:].reshape(-1)
    return math.exp(-log_probs[targets].mean().item())
