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

Sampling (see :mod:`runtimes.torch.paged_compat`): greedy always; with transformers 5.x also per-request
temperature / top-k / top-p. What a version cannot honour (seed, penalties, min_p, logit_bias; on 4.5x any
temperature > 0) is refused with a 400 naming the parameter, never silently ignored.

The paged kernels have CPU fallbacks (``sdpa_paged``), so the engine's bookkeeping is tested on CPU too;
only speed needs the GPU.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from edgeopt.engine.api import ActiveRequest, EngineConfig, EngineStats, SamplingParams
from edgeopt.engine.outputs import RequestTracker, describe_failure
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.stream import OutputDispatcher, RequestStream
from edgeopt.engine.validation import validate_request
from edgeopt.errors import BackendError, RequestError
from runtimes.torch import paged_compat
from runtimes.torch.cpu_runtime import TorchRuntime


class PagedRuntime(TorchRuntime):
    """The per-slot runtime on CUDA, plus a factory for the paged continuous-batching engine."""

    def create_engine(self, config: EngineConfig) -> PagedEngine:
        # From here on the model runs paged attention only; per-slot steps would misuse its kernels.
        self.model.set_attn_implementation(paged_compat.paged_attention_implementation())
        self.closed = True
        return PagedEngine(self.model, self.tokenizer, self.info, config)


def load_paged_runtime(bundle_dir: Path, manifest: Any, *, dtype: str, kv_capacity_tokens: int | None,
                       max_slots: int | None, context_length: int | None, device: str = "cuda",
                       threads: int | None = None) -> PagedRuntime:
    from runtimes.torch.loading import load_checkpoint, read_config, runtime_info

    cap = read_config(bundle_dir / manifest.model_file).get("attn_logit_softcapping")
    if cap:  # transformers' paged kernels (sdpa_paged, flash paged) never apply the cap
        raise BackendError(f"the paged CUDA engine cannot serve this model: its attention logits are soft-capped "
                           f"(attn_logit_softcapping={cap}, Gemma 2) and transformers' paged attention ignores that",
                           "serve a --format gguf bundle of it (llama.cpp applies the cap), or run the torch "
                           "bundle on CPU (eager attention)")
    model, tokenizer, config = load_checkpoint(bundle_dir, manifest, device, dtype, threads=threads)
    info = runtime_info(bundle_dir / manifest.model_file, config, tokenizer, kv_capacity_tokens, max_slots,
                        context_length)
    return PagedRuntime(model, tokenizer, info)


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
        self.failure: str | None = None  # why the result pump died, if it did (for /health)
        self._eos_ids = sorted(info.eos_token_ids)

    @property
    def is_running(self) -> bool:
        """True while the manager generates and the pump delivers its results (a health check)."""
        return (self._manager is not None and self._manager.is_running() and self._pump is not None
                and self._pump.is_alive() and not self._stopping)

    def start(self) -> None:
        self._manager = paged_compat.create_manager(self.model, self.config, self.info.vocab_size,
                                                    self._eos_ids, self.context_tokens)
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
        paged_compat.check_unsupported(params)
        if self._stopping or self._manager is None or not self._manager.is_running():
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
        try:
            paged_compat.submit(self._manager, request_id, prompt_ids, max_new, params, self._eos_ids,
                                self.info.vocab_size)
        except BaseException:
            with self._lock:
                self._trackers.pop(request_id, None)
            raise
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
            page = paged_compat.PAGE_SIZE
            used = max(0, (paged_compat.num_blocks_for(self.config) - free) * page)
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
            try:
                result = self._manager.get_result(timeout=0.1)
            except Exception as exc:  # noqa: BLE001 - the manager itself is broken: nothing more will come
                self.failure = describe_failure(exc)
                self._fail_everything(self.failure)
                return
            if result is None:
                if self._stopping:
                    return
                continue
            with self._lock:
                tracker = self._trackers.get(result.request_id)
            if tracker is not None:
                try:
                    self._deliver(tracker, result)
                except Exception as exc:  # noqa: BLE001 - detokenizing one request must not stop the pump
                    self._manager.cancel_request(result.request_id)
                    self._forget(tracker, tracker.final_output("error", error=describe_failure(exc)))
            self._dispatcher.flush()

    def _fail_everything(self, error: str) -> None:
        with self._lock:
            leftover = list(self._trackers.values())
            self._trackers.clear()
        for tracker in leftover:
            self._dispatcher.push(tracker.stream, tracker.final_output("error", error=error))
        self._dispatcher.flush()

    def _deliver(self, tracker: RequestTracker, result: Any) -> None:
        seq = tracker.seq
        if result.error:
            # The manager failed this request's step: an error, not a client abort (the server says 500).
            self._forget(tracker, tracker.final_output("error", error=str(result.error)))
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
        if paged_compat.is_finished(result):
            self._forget(tracker, tracker.final_output("length" if len(seq.output_ids) >= seq.params.max_tokens
                                                       else "stop"))

    def _forget(self, tracker: RequestTracker, output: Any) -> None:
        with self._lock:
            self._trackers.pop(tracker.seq.request_id, None)
        self._finished_total += 1
        self._dispatcher.push(tracker.stream, output)
