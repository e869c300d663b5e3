"""The engine's counters (/metrics, the monitor) gathered from the parts of its step that keep them."""

from __future__ import annotations

from edgeopt.engine.api import EngineStats
from edgeopt.engine.registry import RequestRegistry
from edgeopt.engine.scheduler import Scheduler
from edgeopt.engine.speculation.verify import DraftVerifier
from edgeopt.engine.step_sampler import StepSampler


def engine_stats(scheduler: Scheduler, sampler: StepSampler, verifier: DraftVerifier | None,
                 requests: RequestRegistry, waiting: int, steps_total: int, prefill_tokens_total: int) -> EngineStats:
    """A snapshot; ``waiting`` counts the scheduler's queue and the requests still in the engine's inbox."""
    cache, masks = scheduler.cache.counters, sampler.masks
    spec = verifier.counters.snapshot() if verifier is not None else {}
    return EngineStats(
        running=len(scheduler.running), waiting=waiting, kv_used_tokens=scheduler.kv.used,
        kv_capacity_tokens=scheduler.kv.capacity, preemptions_total=scheduler.preemptions_total,
        steps_total=steps_total, prefill_tokens_total=prefill_tokens_total,
        generated_tokens_total=requests.generated_tokens_total, kv_cached_tokens=scheduler.cache.cells,
        prefix_cache_queries_total=cache.queries, prefix_cache_hits_total=cache.hits,
        prefix_cache_query_tokens_total=cache.query_tokens, prefix_cache_hit_tokens_total=cache.hit_tokens,
        prefix_cache_evicted_tokens_total=scheduler.cache.evicted_total,
        grammar_steps_total=sampler.grammar_steps, grammar_mask_seconds_total=masks.compute_seconds,
        grammar_wait_seconds_total=sampler.mask_wait_s, grammar_apply_seconds_total=sampler.apply_s,
        grammar_checked_total=masks.checked_total, grammar_refused_total=masks.refused_total,
        grammar_redo_seconds_total=masks.redo_seconds,
        speculative_drafted_total={source: drafted for source, (drafted, _) in spec.items()},
        speculative_accepted_total={source: accepted for source, (_, accepted) in spec.items()},
    )
