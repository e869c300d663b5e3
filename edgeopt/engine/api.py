"""The engine's public surface: what the server (or any caller) hands in and gets back.

Plain dataclasses, and the :class:`ServingEngine` protocol the server drives; the implementation lives in
the other modules of this package. What a request's stream yields (:class:`RequestOutput`, :class:`TokenLogprob`)
is defined in :mod:`edgeopt.engine.request_output`, below the stream, and named here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from edgeopt.engine.prefix_tree import SHARED_NAMESPACE, CachedPrefix
from edgeopt.engine.request_output import RequestOutput, TokenLogprob
from edgeopt.engine.stream import RequestStream

if TYPE_CHECKING:
    from edgeopt.engine.grammar import Grammar

__all__ = ["SHARED_NAMESPACE", "ActiveRequest", "CachedPrefix", "EngineConfig", "EngineStats", "RequestOutput",
           "RequestStream", "SamplingParams", "ServingEngine", "TokenLogprob", "DEFAULT_PREFILL_CHUNK"]

T = TypeVar("T")

@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    min_p: float = 0.0
    seed: int | None = None  # per-request generator: same seed, same output
    repetition_penalty: float = 1.0  # multiplicative (CTRL-style), over prompt and output tokens
    presence_penalty: float = 0.0  # additive, OpenAI semantics, over output tokens
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop: list[str] = field(default_factory=list)  # stop strings; never included in the output
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # Constrained decoding: the output must match this grammar (compiled by edgeopt.engine.grammar.
    # GrammarCompiler for this model); the sequence ends with "stop" once the grammar is complete.
    grammar: Grammar | None = None
    # None: no logprobs. N >= 0: each generated token's logprob and its N most likely alternatives
    # (see edgeopt.engine.logprobs for which logits they come from).
    logprobs: int | None = None
    # None: no prompt logprobs. N >= 0: the same for every prompt token after the first (echo).
    prompt_logprobs: int | None = None


DEFAULT_PREFILL_CHUNK = 256


@dataclass(frozen=True)
class EngineConfig:
    kv_capacity_tokens: int  # KV cells the runtime holds (all sequences together)
    max_running: int  # concurrent sequences (<= runtime slots)
    max_waiting: int = 256  # queued requests beyond which add_request raises OverloadedError
    step_token_budget: int = 512  # tokens per forward pass (decode tokens first, then prefill chunks)
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK  # longest prefill slice of one sequence in a step that also decodes
    context_length: int = 4096  # longest sequence (prompt + output)
    prefix_cache: bool = True  # reuse cached prompt prefixes when the runtime offers cache slots
    # Wake the caller's event loop at most this often with new text, unless an output is a request's first or
    # last (edgeopt.engine.stream): 0 sends every token at once; `edgeopt serve` uses 50 ms. (The torch paged
    # engine delivers what transformers' manager hands it as it comes.)
    stream_interval_s: float = 0.0
    # Speculative decoding (edgeopt.engine.speculation): "off", "ngram" (prompt lookup) or "auto" (the best
    # source the runtime offers: today n-gram lookup), under the adaptive controller either way. Off unless
    # asked for (an engine driven by hand steps one token at a time); `edgeopt serve` asks for "auto".
    speculative: str = "off"


@dataclass(frozen=True)
class EngineStats:
    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    preemptions_total: int
    steps_total: int
    prefill_tokens_total: int = 0  # prompt tokens computed, recomputation after preemption included
    generated_tokens_total: int = 0
    kv_cached_tokens: int = 0  # KV cells the prefix cache keeps (evicted first when memory is needed)
    prefix_cache_queries_total: int = 0  # admissions that looked their tokens up in the prefix cache
    prefix_cache_hits_total: int = 0  # of those, admissions that reused a cached prefix
    prefix_cache_query_tokens_total: int = 0  # tokens of the sequences looked up
    prefix_cache_hit_tokens_total: int = 0  # of those, tokens reused instead of computed
    prefix_cache_evicted_tokens_total: int = 0  # cached cells given back (to make room, or when emptied)
    # Constrained decoding: steps with at least one grammar, seconds spent computing their masks (on a
    # helper thread, beside the forward pass) and seconds the engine thread waited for them after it.
    grammar_steps_total: int = 0
    grammar_mask_seconds_total: float = 0.0
    grammar_wait_seconds_total: float = 0.0
    grammar_apply_seconds_total: float = 0.0  # masking the logits and advancing the grammars (engine thread)
    # Rows whose mask waits for their pick (edgeopt.engine.constraint): picks checked, picks refused (those
    # rows' masks were computed after the forward pass: seconds, included in mask and apply seconds).
    grammar_checked_total: int = 0
    grammar_refused_total: int = 0
    grammar_redo_seconds_total: float = 0.0
    # Speculative decoding, per drafting source: tokens sent for verification, and of those, tokens emitted.
    speculative_drafted_total: dict[str, int] = field(default_factory=dict)
    speculative_accepted_total: dict[str, int] = field(default_factory=dict)

    @property
    def kv_usage_ratio(self) -> float:
        return self.kv_used_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens else 0.0


@dataclass(frozen=True)
class ActiveRequest:
    """Per-request detail for the monitor's table."""

    request_id: str
    state: str  # waiting | prefilling | decoding | preempted
    prompt_tokens: int
    generated_tokens: int
    elapsed_s: float


class ServingEngine(Protocol):
    """What the server drives: :class:`edgeopt.engine.Engine`, or the engine a runtime brings with its own
    scheduler (``Backend.own_engine``: ``edgeopt.paged_batching.paged_engine.PagedEngine``). Both keep their
    requests in :class:`edgeopt.engine.registry.RequestRegistry`, so a request ends the same way in either:
    "stop" | "length", "abort" (client gone, shutdown) or "error" (the model failed; the routes answer 500)."""

    context_tokens: int  # longest prompt + completion one request may have
    failure: str | None  # why the engine's thread died, if it did (/health shows it)

    @property
    def is_running(self) -> bool: ...

    def start(self) -> None: ...

    def shutdown(self, close_runtime: bool = True) -> None: ...

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    cache_namespace: str = SHARED_NAMESPACE) -> RequestStream:
        """Queue a request; it borrows cached prefixes only from ``cache_namespace`` (its tenant's) and the
        operator's, and leaves its own KV there (edgeopt.engine.prefix_tree)."""
        ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def active_requests(self) -> list[ActiveRequest]: ...

    def clear_prefix_cache(self) -> int:
        """Evict every cached prefix no running request uses (blocking until done); returns the KV cells
        freed. 0 from engines without a prefix cache."""
        ...

    def adopt_prefix(self, tokens: list[int], fill: Callable[[int], bool],
                     namespace: str = SHARED_NAMESPACE) -> bool:
        """Make ``tokens`` a prefix-cache entry of ``namespace`` whose KV ``fill(sequence id)`` loads into the
        runtime (True when it did; ``serve --warm`` loading a saved state). False from engines without a prefix
        cache."""
        ...

    def with_cached_prefix(self, tokens: list[int], use: Callable[[int], T],
                           namespace: str = SHARED_NAMESPACE) -> T | None:
        """``use(sequence id)`` of the entry of ``namespace`` holding exactly ``tokens``, while no step can
        touch it (``serve --warm`` saving a state); None when none holds them, or the engine keeps no prefix cache."""
        ...

    def cached_prefixes(self) -> list[CachedPrefix]:
        """Every prefix-cache entry (its tokens and namespace), most recently used first (a model swapped out
        to disk saves them with ``with_cached_prefix``); [] from engines without a prefix cache."""
        ...

    def restore_prefix(self, tokens: list[int], fill: Callable[[int], bool],
                       namespace: str = SHARED_NAMESPACE) -> bool:
        """Make ``tokens`` a prefix-cache entry of ``namespace`` whose KV ``fill(sequence id)`` loads (True when
        it did), into a running sequence id no request uses, then kept as a finished request's KV is: cells it
        shares with cached entries are kept once, and it ranks less recently used than every cached entry (a
        swapped-out model's entries, restored most recent first). Evicts nothing: False when the entry does not fit
        beside what is cached and running, or ``fill`` refuses; False from engines without a prefix cache."""
        ...
