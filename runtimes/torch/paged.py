"""CUDA path of ``--runtime torch``: the per-slot torch runtime whose model a paged engine takes over.

:func:`load_paged_runtime` returns a :class:`PagedRuntime`: a complete :class:`edgeopt.runtimes.base.Runtime` (the
per-slot ``DynamicCache`` runtime, which works on CUDA too) that can hand its model over
(:meth:`PagedRuntime.hand_over_model`) to transformers' continuous batching with paged attention
(:mod:`edgeopt.paged_batching`, the torch backend entry's own engine), which the launcher serves instead of
edgeopt's Engine. This module knows nothing of either engine: runtimes sit below them.

Sizing: the KV token budget our planner computed becomes ``num_blocks = budget // page_size`` (never the
manager's "fraction of free GPU memory", which double counts on a Jetson's unified memory), and
``max_batch_tokens`` is ``EngineConfig.step_token_budget``.

The paged kernels have CPU fallbacks (``sdpa_paged``), so the engine is tested on CPU against the real
manager too; only speed needs the GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.store.bundle import Manifest
from edgeopt.errors import BackendError
from edgeopt.profiles.platform import AcceleratorKind
from edgeopt.runtimes.base import RuntimeInfo, Tokenizer
from edgeopt.runtimes.torch.cpu_runtime import TorchRuntime
from edgeopt.runtimes.torch.loading import TorchDevice, load_checkpoint, pick_device, read_config, runtime_info


class PagedRuntime(TorchRuntime):
    """The per-slot runtime on CUDA, whose model the paged continuous-batching engine takes over. ``cuda_graphs``:
    capture the paged steps as CUDA graphs (True), never (False), or transformers' choice (None)."""

    def __init__(self, model: Any, tokenizer: Tokenizer, info: RuntimeInfo, cuda_graphs: bool | None = None) -> None:
        super().__init__(model, tokenizer, info)
        self.cuda_graphs = cuda_graphs

    def hand_over_model(self, attention_implementation: str) -> Any:
        """The model, switched to ``attention_implementation`` (a paged kernel) for the engine that takes it
        over; this runtime is closed from here on, since per-slot steps would misuse those kernels."""
        self.model.set_attn_implementation(attention_implementation)
        self.closed = True
        return self.model


def load_paged_runtime(bundle_dir: Path, manifest: Manifest, *, dtype: str, kv_capacity_tokens: int | None,
                       max_slots: int | None, context_length: int | None, device: TorchDevice | None = None,
                       threads: int | None = None, cuda_graphs: bool | None = None) -> PagedRuntime:
    cap = read_config(bundle_dir / manifest.model_file).get("attn_logit_softcapping")
    if cap:  # transformers' paged kernels (sdpa_paged, flash paged) never apply the cap
        raise BackendError(f"the paged CUDA engine cannot serve this model: its attention logits are soft-capped "
                           f"(attn_logit_softcapping={cap}, Gemma 2) and transformers' paged attention ignores that",
                           "serve a GGUF bundle of it (edgeopt optimize --format gguf: llama.cpp applies the cap), "
                           "or run the torch bundle on CPU (eager attention)")
    device = device or pick_device(AcceleratorKind.CUDA_GPU.value)  # the engine this module drives is CUDA's (tests run it on the CPU too)
    model, tokenizer, config = load_checkpoint(bundle_dir, manifest, device, dtype, threads=threads)
    info = runtime_info(bundle_dir / manifest.model_file, config, tokenizer, kv_capacity_tokens, max_slots,
                        context_length)
    return PagedRuntime(model, tokenizer, info, cuda_graphs)
