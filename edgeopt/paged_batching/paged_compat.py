"""transformers' continuous-batching manager behind :class:`~edgeopt.paged_batching.paged_engine.BatchingManager`
(:class:`TransformersManager`), and the parts of its API that changed between releases.

transformers 4.5x: sizing (``num_blocks``, ``block_size``, ``max_batch_tokens``) and sampling travel on the
``GenerationConfig``; sampling and EOS are global to the manager; outputs carry a ``RequestStatus`` enum.
transformers 5.x: a ``ContinuousBatchingConfig`` carries the sizing, and temperature / top-k / top-p can be
set per request (``per_request_processors``); EOS is per request.

Either way the KV block count comes from *our* budget (``kv_capacity_tokens // page``), never from the
manager's "fraction of free GPU memory" heuristic, which double counts on a Jetson's unified memory.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from edgeopt.engine.api import EngineConfig, SamplingParams
from edgeopt.errors import ConfigError, RequestError
from edgeopt.paged_batching.paged_engine import PagedResult, PagedUsage

PAGE_SIZE = 32  # tokens per page: small pages waste little KV on short chat requests
GREEDY_TEMPERATURE = 1e-5  # 5.x: do_sample is global; this temperature makes sampling an argmax
# 5.x builds a per-request processor only when the creation-time value is not neutral, so top-p starts a
# hair below 1 (it cuts no token with probability above ~1e-7) and top-k at the vocabulary size.
NEAR_ONE_TOP_P = 1.0 - 1e-7
def unsupported_settings(params: SamplingParams) -> dict[str, object]:
    """What a request asks of the sampler that transformers' manager cannot do, by parameter name: every value
    here must stay at its neutral default (listed beside it)."""
    asked = {"seed": (params.seed, None), "repetition_penalty": (params.repetition_penalty, 1.0),
             "presence_penalty": (params.presence_penalty, 0.0), "frequency_penalty": (params.frequency_penalty, 0.0),
             "min_p": (params.min_p, 0.0), "logprobs": (params.logprobs, None),
             "prompt_logprobs": (params.prompt_logprobs, None)}
    return {name: value for name, (value, neutral) in asked.items() if value != neutral}


class TransformersManager:
    """A transformers ``ContinuousBatchingManager`` sized by our EngineConfig (created on :meth:`start`)."""

    def __init__(self, model: Any, config: EngineConfig, vocab_size: int, eos_ids: list[int],
                 max_new_tokens: int, cuda_graphs: bool | None = None) -> None:
        self._model, self._config, self._vocab_size = model, config, vocab_size
        self._eos_ids, self._max_new_tokens = eos_ids, max_new_tokens
        self._cuda_graphs = cuda_graphs
        self.manager: Any = None  # the transformers object, once started

    def start(self) -> None:
        self.manager = create_manager(self._model, self._config, self._vocab_size, self._eos_ids,
                                      self._max_new_tokens, self._cuda_graphs)
        self.manager.start()

    def stop(self, timeout_s: float) -> None:
        self.manager.stop(block=True, timeout=timeout_s)

    def is_running(self) -> bool:
        return bool(self.manager.is_running())

    def check_supported(self, params: SamplingParams) -> None:
        check_unsupported(params)
        if not has_per_request_sampling():
            check_global_greedy(params)

    def submit(self, request_id: str, prompt_ids: list[int], max_new_tokens: int, params: SamplingParams) -> None:
        submit(self.manager, request_id, prompt_ids, max_new_tokens, params, self._eos_ids, self._vocab_size)

    def cancel(self, request_id: str) -> None:
        self.manager.cancel_request(request_id)

    def next_result(self, timeout_s: float) -> PagedResult | None:
        result = self.manager.get_result(timeout=timeout_s)
        if result is None:
            return None
        return PagedResult(result.request_id, [int(t) for t in result.generated_tokens], is_finished(result),
                           str(result.error) if result.error else None)

    def usage(self) -> PagedUsage:
        # The batch processor exists only while the generation thread runs (both releases name it so).
        processor = getattr(self.manager, "batch_processor", None)
        steps = int(getattr(self.manager, "current_batch", 0) or 0)
        if processor is None:
            return PagedUsage(0, 0, 0, steps)
        free = processor.cache.get_num_free_blocks()
        used = max(0, (num_blocks_for(self._config) - free) * PAGE_SIZE)
        return PagedUsage(len(processor.scheduler.active_requests), len(processor.scheduler.waiting_requests),
                          used, steps)


def has_per_request_sampling() -> bool:
    from transformers.generation import configuration_utils

    return hasattr(configuration_utils, "ContinuousBatchingConfig")


def paged_attention_implementation() -> str:
    """The flash-attention paged kernel when flash_attn is installed, else SDPA over paged KV (5.x spells
    them ``paged|<kernel>``, 4.5x ``paged_attention`` / ``sdpa_paged``)."""
    flash = importlib.util.find_spec("flash_attn") is not None
    if has_per_request_sampling():
        return "paged|flash_attention_2" if flash else "paged|sdpa"
    return "paged_attention" if flash else "sdpa_paged"


def num_blocks_for(config: EngineConfig, page_size: int = PAGE_SIZE) -> int:
    return max(1, config.kv_capacity_tokens // page_size)


def paged_config(config: EngineConfig, page_size: int = PAGE_SIZE, cuda_graphs: bool | None = None) -> Any:
    """transformers 5.x: the ContinuousBatchingConfig sized by our budget. ``cuda_graphs`` None leaves the
    choice to transformers (it graphs the steps only where the attention kernel needs no mask)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    # The tokens per KV block: ``block_size`` since 5.x's config took over sizing, ``page_size`` before.
    fields = ContinuousBatchingConfig.__dataclass_fields__
    size_field = "block_size" if "block_size" in fields else "page_size"
    return ContinuousBatchingConfig(
        **{size_field: page_size}, num_blocks=num_blocks_for(config, page_size),
        max_batch_tokens=config.step_token_budget, max_requests_per_batch=config.max_running,
        per_request_processors=True, allow_block_sharing=False, use_cuda_graph=cuda_graphs,
    )


def create_manager(model: Any, config: EngineConfig, vocab_size: int, eos_ids: list[int],
                   max_new_tokens: int, cuda_graphs: bool | None = None) -> Any:
    """A started-ready (not started) ContinuousBatchingManager for this engine config."""
    from transformers import GenerationConfig

    eos = eos_ids or -1
    if has_per_request_sampling():
        gen = GenerationConfig(do_sample=True, temperature=GREEDY_TEMPERATURE, top_k=vocab_size,
                               top_p=NEAR_ONE_TOP_P, max_new_tokens=max_new_tokens, eos_token_id=eos)
        return model.init_continuous_batching(generation_config=gen,
                                              continuous_batching_config=paged_config(config, cuda_graphs=cuda_graphs))
    if cuda_graphs is not None:
        raise ConfigError(f"cuda_graphs={cuda_graphs} needs transformers 5.x's continuous batching config",
                          "leave the torch runtime's cuda_graphs option unset, or upgrade transformers to 5.x")
    gen = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos,
                           num_blocks=num_blocks_for(config), block_size=PAGE_SIZE,
                           max_batch_tokens=config.step_token_budget, scheduler="fifo")
    return model.init_continuous_batching(generation_config=gen, streaming=True)


def submit(manager: Any, request_id: str, prompt_ids: list[int], max_new_tokens: int, params: SamplingParams,
           eos_ids: list[int], vocab_size: int) -> None:
    if has_per_request_sampling():
        eos = -1 if params.ignore_eos else eos_ids or -1
        manager.add_request(list(prompt_ids), request_id=request_id, max_new_tokens=max_new_tokens, streaming=True,
                            eos_token_id=eos, **sampling_kwargs(params, vocab_size))
        return
    check_global_greedy(params)
    manager.add_request(list(prompt_ids), request_id=request_id, max_new_tokens=max_new_tokens)


def is_finished(result: Any) -> bool:
    if hasattr(result, "is_finished"):
        return bool(result.is_finished())
    return getattr(result.status, "value", result.status) in ("finished", "failed")


def check_unsupported(params: SamplingParams) -> None:
    for name, value in unsupported_settings(params).items():
        raise RequestError(f"{name}={value!r} is not supported by the CUDA paged engine",
                           "leave it at its default, or serve on CPU / with llama.cpp", param=name)
    if params.logit_bias:
        raise RequestError("logit_bias is not supported by the CUDA paged engine", "leave it empty",
                           param="logit_bias")
    if params.grammar is not None:  # transformers' manager samples inside its own loop: no mask can reach it
        raise RequestError(f"constrained decoding ({params.grammar.spec.param}) is not supported by the CUDA "
                           "paged engine", "serve the bundle on a host without CUDA (the CPU torch runtime), or a GGUF/ONNX one "
                           "(edgeopt optimize --format gguf)",
                           param=params.grammar.spec.param)


def check_global_greedy(params: SamplingParams) -> None:
    """transformers 4.5x samples with one global setting; this engine is built greedy, so say so."""
    if params.temperature != 0:
        raise RequestError(f"temperature={params.temperature} needs per-request sampling, which this "
                           "transformers version's continuous batching lacks (it decodes greedily)",
                           "send temperature=0, or upgrade transformers to 5.x", param="temperature")
    if params.ignore_eos:
        raise RequestError("ignore_eos is not supported by this transformers version's continuous batching",
                           "leave ignore_eos false, or upgrade transformers to 5.x", param="ignore_eos")


def sampling_kwargs(params: SamplingParams, vocab_size: int) -> dict[str, Any]:
    """transformers 5.x per-request logits-processor kwargs; refuse what it cannot honour."""
    check_unsupported(params)
    if params.temperature == 0:
        return {"temperature": GREEDY_TEMPERATURE, "top_k": vocab_size, "top_p": NEAR_ONE_TOP_P}
    return {"temperature": float(params.temperature), "top_k": int(params.top_k or vocab_size),
            "top_p": float(min(params.top_p, NEAR_ONE_TOP_P))}
