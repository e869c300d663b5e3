"""CUDA path of ``--runtime torch``: the per-slot torch runtime that hands the model to a paged engine.

:func:`load_paged_runtime` returns a :class:`PagedRuntime`: a complete :class:`runtimes.base.Runtime` (the
per-slot ``DynamicCache`` runtime, which works on CUDA too) whose :meth:`~PagedRuntime.create_engine`
brings transformers' continuous batching with paged attention
(:class:`~runtimes.torch.paged_engine.PagedEngine`), which the launcher serves instead of edgeopt's Engine.

Sizing: the KV token budget our planner computed becomes ``num_blocks = budget // page_size`` (never the
manager's "fraction of free GPU memory", which double counts on a Jetson's unified memory), and
``max_batch_tokens`` is ``EngineConfig.step_token_budget``.

Sampling (see :mod:`runtimes.torch.paged_compat`): greedy always; with transformers 5.x also per-request
temperature / top-k / top-p. What a version cannot honour (seed, penalties, min_p, logit_bias; on 4.5x any
temperature > 0) is refused with a 400 naming the parameter, never silently ignored.

The paged kernels have CPU fallbacks (``sdpa_paged``), so the engine is tested on CPU against the real
manager too; only speed needs the GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.bundle import Manifest
from edgeopt.engine.api import EngineConfig
from edgeopt.errors import BackendError
from runtimes.base import RuntimeInfo, Tokenizer
from runtimes.torch import paged_compat
from runtimes.torch.cpu_runtime import TorchRuntime
from runtimes.torch.loading import load_checkpoint, read_config, runtime_info
from runtimes.torch.paged_engine import PagedEngine


class PagedRuntime(TorchRuntime):
    """The per-slot runtime on CUDA, plus the paged continuous-batching engine it brings. ``cuda_graphs``:
    capture the paged steps as CUDA graphs (True), never (False), or transformers' choice (None)."""

    def __init__(self, model: Any, tokenizer: Tokenizer, info: RuntimeInfo, cuda_graphs: bool | None = None) -> None:
        super().__init__(model, tokenizer, info)
        self.cuda_graphs = cuda_graphs

    def create_engine(self, config: EngineConfig) -> PagedEngine:
        # From here on the model runs paged attention only; per-slot steps would misuse its kernels.
        self.model.set_attn_implementation(paged_compat.paged_attention_implementation())
        self.closed = True
        context_tokens = min(config.context_length, config.kv_capacity_tokens, self.info.context_length)
        eos_ids = sorted(self.info.eos_token_ids)

        def create_manager() -> paged_compat.TransformersManager:
            return paged_compat.TransformersManager(self.model, config, self.info.vocab_size, eos_ids, context_tokens,
                                                    self.cuda_graphs)

        return PagedEngine(create_manager, self.tokenizer, self.info, config)


def load_paged_runtime(bundle_dir: Path, manifest: Manifest, *, dtype: str, kv_capacity_tokens: int | None,
                       max_slots: int | None, context_length: int | None, device: str = "cuda",
                       threads: int | None = None, cuda_graphs: bool | None = None) -> PagedRuntime:
    cap = read_config(bundle_dir / manifest.model_file).get("attn_logit_softcapping")
    if cap:  # transformers' paged kernels (sdpa_paged, flash paged) never apply the cap
        raise BackendError(f"the paged CUDA engine cannot serve this model: its attention logits are soft-capped "
                           f"(attn_logit_softcapping={cap}, Gemma 2) and transformers' paged attention ignores that",
                           "serve a GGUF bundle of it (edgeopt optimize --format gguf: llama.cpp applies the cap), or run the torch "
                           "bundle on CPU (eager attention)")
    model, tokenizer, config = load_checkpoint(bundle_dir, manifest, device, dtype, threads=threads)
    info = runtime_info(bundle_dir / manifest.model_file, config, tokenizer, kv_capacity_tokens, max_slots,
                        context_length)
    return PagedRuntime(model, tokenizer, info, cuda_graphs)
