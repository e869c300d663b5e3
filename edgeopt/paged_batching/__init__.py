"""transformers' continuous batching with paged attention: the engine the torch format brings on CUDA.

It sits beside edgeopt's Engine, not under a runtime: it is a :class:`~edgeopt.engine.api.ServingEngine`
built on the engine's request registry, and runtimes never import the engine. The torch backend entry
names :func:`engine_for` (``Backend.own_engine``); the launcher calls it once the runtime is loaded and
serves what it returns, or edgeopt's Engine when it returns None.

Sampling (see :mod:`edgeopt.paged_batching.paged_compat`): greedy always; with transformers 5.x also
per-request temperature / top-k / top-p. What a version cannot honour (seed, penalties, min_p, logit_bias;
on 4.5x any temperature > 0) is refused with a 400 naming the parameter, never silently ignored.
"""

from __future__ import annotations

from edgeopt.engine.api import EngineConfig
from edgeopt.paged_batching import paged_compat
from edgeopt.paged_batching.paged_engine import PagedEngine
from edgeopt.runtimes.base import Runtime
from edgeopt.runtimes.torch.paged import PagedRuntime


def engine_for(runtime: Runtime, config: EngineConfig) -> PagedEngine | None:
    """The paged engine over a CUDA torch runtime's model (which it takes over); None for a runtime that
    steps its own model (torch on CPU): edgeopt's Engine drives that one."""
    if not isinstance(runtime, PagedRuntime):
        return None
    model = runtime.hand_over_model(paged_compat.paged_attention_implementation())
    context_tokens = min(config.context_length, config.kv_capacity_tokens, runtime.info.context_length)
    eos_ids = sorted(runtime.info.eos_token_ids)

    def create_manager() -> paged_compat.TransformersManager:
        return paged_compat.TransformersManager(model, config, runtime.info.vocab_size, eos_ids, context_tokens,
                                                runtime.cuda_graphs)

    return PagedEngine(create_manager, runtime.tokenizer, runtime.info, config)
