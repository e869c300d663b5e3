"""Export Phi-3's LongRoPE so the ONNX graph switches between its short and long factors as
transformers does.

transformers picks the factor set per forward pass with a Python test (``max(position_ids) + 1 >
original_max_position_embeddings``); tracing freezes that test into whichever branch the dummy input
took, and the graph then computes wrong logits on the other side of the window. During the export,
the rotary module's forward is replaced by one that makes the same choice with ``torch.where`` on the
positions, which the trace keeps as a graph node. Everything else (frequencies, the attention factor
on cos/sin) is transformers' own arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from edgeopt.exporters.gguf.architectures.phi3 import longrope_scaling


def _switching_forward(self: Any, x: Any, position_ids: Any) -> tuple[Any, Any]:
    """Phi3RotaryEmbedding.forward with the short/long choice as a traced ``where``."""
    import torch

    original = self.config.original_max_position_embeddings
    long_inv_freq, _ = self.rope_init_fn(self.config, x.device, seq_len=original + 1)
    longer = (position_ids.max() + 1) > original
    inv_freq = torch.where(longer, long_inv_freq.to(x.device), self.original_inv_freq.to(x.device))
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (inv_freq_expanded @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


@contextmanager
def traceable_longrope(config: dict[str, Any]) -> Iterator[None]:
    """While exporting a LongRoPE Phi-3 checkpoint, its rotary modules switch factors in-graph."""
    if longrope_scaling(config) is None:
        yield
        return
    from transformers.models.phi3 import modeling_phi3

    rotary = modeling_phi3.Phi3RotaryEmbedding
    original_forward = rotary.forward
    rotary.forward = _switching_forward
    try:
        yield
    finally:
        rotary.forward = original_forward
