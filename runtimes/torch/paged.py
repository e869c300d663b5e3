"""CUDA path of ``--runtime torch``: transformers' continuous batching with paged attention.

How it plugs into the server (the honest choice): transformers' ``ContinuousBatchingManager`` owns its
own scheduler, paged KV cache and sampler, so it cannot sit *behind* our engine as a per-step
``Runtime`` without re-implementing its internals (which change every release). Instead
:class:`PagedEngine` is an *alternative engine* with our Engine API (``start``, ``add_request`` ->
:class:`RequestStream`, ``abort``, ``stats``, ``active_requests``, ``shutdown``, ``context_tokens``),
so the routes, streaming and metrics are the same code. Detokenization, stop strings and stop token ids
reuse the engine's :class:`RequestTracker`.

The object :func:`load_paged_runtime` returns is also a complete :class:`runtimes.base.Runtime` (the
per-slot ``DynamicCache`` runtime, which works on CUDA too), plus ``create_engine(config)``. A launcher
that calls ``create_engine`` when present gets paged attention; one that does not still serves
correctly through our engine.

Sizing: the KV token budget our planner computed becomes ``num_blocks = budget // page_size`` (never the
manager's "fraction of free GPU memory", which double counts on a Jetson's unified memory), and
``max_batch_tokens`` is ``EngineConfig.step_token_budget``.

Sampling: greedy is exact. Temperature / top-k / top-p go to transformers' per-request logits
processors; seed, penalties, min_p and logit_bias are not supported by this path and are refused with
a 400 naming the parameter rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, SamplingParams
from edgeopt.engine.outputs import RequestTracker
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.stream import OutputDispatcher, RequestStream
from edgeopt.engine.validation import validate_request
from edgeopt.errors import BackendError, RequestError
from runtimes.torch.cpu_runtime import TorchRuntime

PAGE_SIZE = 32  # tokens per page: small pages waste little KV on short chat requests
GREEDY_TEMPERATURE = 1e-5  # do_sample is global in transformers' CB; this makes sampling an argmax
# transformers builds a per-request processor only when the creation-time value is not neutral, so
# top-p starts a hair below 1 (cuts no token with probability above ~1e-7) and top-k at the vocabulary.
NEAR_ONE_TOP_P = 1.0 - 1e-7
UNSUPPORTED = {"seed": None, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
               "min_p": 0.0}


class PagedRuntime(TorchRuntime):
    """The per-slot runtime on CUDA, plus a factory for the paged continuous-batching engine."""

    def create_engine(self, config: EngineConfig) -> PagedEngine:
        return PagedEngine(self.model, self.tokenizer, self.info, config)


def load_paged_runtime(bundle_dir: Path, manifest: Any, *, dtype: str, kv_capacity_tokens: int | None,
                       max_slots: int | None, context_length: int | None) -> PagedRuntime:
    from runtimes.torch.loading import load_checkpoint, runtime_info

    model, tokenizer, config = load_checkpoint(bundle_dir, manifest, "cuda", dtype, threads=None)
    info = runtime_info(bundle_dir / manifest.model_file, config, tokenizer, kv_capacity_tokens, max_slots,
                        context_length)
    return PagedRuntime(model, tokenizer, info)


def paged_config(config: EngineConfig, page_size: int = PAGE_SIZE) -> Any:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    return ContinuousBatchingConfig(
        page_size=page_size, num_blocks=max(1, config.kv_capacity_tokens // page_size),
        max_batch_tokens=config.step_token_budget, max_requests_per_batch=config.max_running,
        per_request_processors=True, allow_block_sharing=False,
    )


class PagedEngine:
    def __init__(self, model: Any, tokenizer: Any, info: Any, config: EngineConfig) -> None:
        self.model, self.tokenizer, self.info, self.config = model, tokenizer, info, config
        self.context_tokens = min(config.context_length, config.kv_capacity_tokens, info.context_length)
        self._trackers: dict[str, RequestTracker] = {}
        self._lock = threading.Lock()
        self._dispatcher = OutputDispatcher()
        self._manager: Any = None
        self._pump: threading.Thread | None = None
        self._stopping = False
        self._finished_total = 0
        self.generated_tokens_total = 0

    def start(self) -> None:
        from transformers import GenerationConfig

        gen = GenerationConfig(do_sample=True, temperature=GREEDY_TEMPERATURE, top_k=self.info.vocab_size,
                               top_p=NEAR_ONE_TOP_P,
                               max_new_tokens=self.context_tokens, eos_token_id=sorted(self.info.eos_token_ids) or -1)
        self._manager = self.model.init_continuous_batching(generation_config=gen,
                                                            continuous_batching_config=paged_config(self.config))
        self._manager.start()
        self._pump = threading.Thread(target=self._pump_results, name="edgeopt-paged-pump", daemon=True)
        self._pump.start()

    def shutdown(self, close_runtime: bool = True) -> None:
        self._stopping = True
        if self._manager is not None:
            self._manager.stop(block=True, timeout=30)
        if self._pump is not None:
            self._pump.join(timeout=30)
        with self._lock:
            leftover = list(self._trackers.values())
            self._trackers.clear()
        for tracker in leftover:
            self._dispatcher.push(tracker.stream, tracker.final_output("abort"))
        self._dispatcher.flush()

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        loop = asyncio.get_running_loop()
        validate_request(prompt_ids, params, self.info.vocab_size, self.context_tokens)
        processor_kwargs = sampling_kwargs(params, self.info.vocab_size)
        if self._stopping or self._manager is None:
            raise BackendError("the paged engine is not running", "retry against a running server")
        stream = RequestStream(request_id, loop, on_close=self.abort)
        tracker = RequestTracker(Sequence(request_id, prompt_ids, params), stream, self.tokenizer,
                                 self.info.eos_token_ids)
        with self._lock:
            if request_id in self._trackers:
                raise RequestError(f"request id {request_id!r} is already in flight", "use a unique id",
                                   param="request_id")
            self._trackers[request_id] = tracker
        max_new = min(params.max_tokens, self.context_tokens - len(prompt_ids))
        eos = -1 if params.ignore_eos else sorted(self.info.eos_token_ids | set(params.stop_token_ids)) or -1
        self._manager.add_request(list(prompt_ids), request_id=request_id, max_new_tokens=max_new, streaming=True,
                                  eos_token_id=eos, **processor_kwargs)
        return stream

    def abort(self, request_id: str) -> None:
        with self._lock:
            tracker = self._trackers.pop(request_id, None)
        if tracker is None:
            return
        self._manager.cancel_request(request_id)
        self._dispatcher.push(tracker.stream, tracker.final_output("abort"))
        self._dispatcher.flush()

    def stats(self) -> EngineStats:
        processor = getattr(self._manager, "batch_processor", None)
        running = waiting = used = 0
        if processor is not None:
            running = len(processor.scheduler.active_requests)
            waiting = len(processor.scheduler.waiting_requests)
            free = processor.cache.get_num_free_blocks()
            used = max(0, (self.config.kv_capacity_tokens // PAGE_SIZE - free) * PAGE_SIZE)
        return EngineStats(running=running, waiting=waiting, kv_used_tokens=used,
                           kv_capacity_tokens=self.config.kv_capacity_tokens, preemptions_total=0,
                           steps_total=getattr(self._manager, "current_batch", 0),
                           generated_tokens_total=self.generated_tokens_total)

    def active_requests(self) -> list[ActiveRequest]:
        now = time.monotonic()
        with self._lock:
            seqs = [t.seq for t in self._trackers.values()]
        return [ActiveRequest(s.request_id, "decoding" if s.output_ids else "prefilling", len(s.prompt_ids),
                              len(s.output_ids), now - s.arrival_s) for s in seqs]

    def _pump_results(self) -> None:
        """Turn the manager's cumulative streaming outputs into our text deltas."""
        while not self._stopping or self._trackers:
            result = self._manager.get_result(timeout=0.1)
            if result is None:
                if self._stopping:
                    return
                continue
            with self._lock:
                tracker = self._trackers.get(result.request_id)
            if tracker is not None:
                self._deliver(tracker, result)
            self._dispatcher.flush()

    def _deliver(self, tracker: RequestTracker, result: Any) -> None:
        seq = tracker.seq
        if result.error:
            self._forget(tracker, tracker.final_output("abort", error=str(result.error)))
            return
        for token in result.generated_tokens[len(seq.output_ids):]:
            seq.output_ids.append(int(token))
            self.generated_tokens_total += 1
            output = tracker.on_token(int(token), self.context_tokens)
            if output.finished:
                self._manager.cancel_request(seq.request_id)  # a stop string ended it before the manager did
                self._forget(tracker, output)
                return
            self._dispatcher.push(tracker.stream, output)
        if result.is_finished():
            self._forget(tracker, tracker.final_output("length" if len(seq.output_ids) >= seq.params.max_tokens
                                                       else "stop"))

    def _forget(self, tracker: RequestTracker, output: Any) -> None:
        with self._lock:
            self._trackers.pop(tracker.seq.request_id, None)
        self._finished_total += 1
        self._dispatcher.push(tracker.stream, output)


def sampling_kwargs(params: SamplingParams, vocab_size: int) -> dict[str, Any]:
    """Per-request logits-processor kwargs for transformers' CB; refuse what it cannot honour."""
    for name, neutral in UNSUPPORTED.items():
        if getattr(params, name) != neutral:
            raise RequestError(f"{name}={getattr(params, name)!r} is not supported by the CUDA paged engine",
                               "leave it at its default, or serve on CPU / with llama.cpp", param=name)
    if params.logit_bias:
        raise RequestError("logit_bias is not supported by the CUDA paged engine", "leave it empty",
                           param="logit_bias")
    if params.temperature == 0:
        return {"temperature": GREEDY_TEMPERATURE, "top_k": vocab_size, "top_p": NEAR_ONE_TOP_P}
    return {"temperature": float(params.temperature), "top_k": int(params.top_k or vocab_size),
            "top_p": float(min(params.top_p, NEAR_ONE_TOP_P))}
