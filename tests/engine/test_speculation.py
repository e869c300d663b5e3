"""Speculative decoding in the engine (fake runtimes): the output is the target's own, token for token at
temperature 0 and seed for seed when sampling, with every feature that touches a token; sampled tokens
follow the target's distribution (chi-square); the KV left behind is the same as without speculation."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
from scipy.stats import chi2

from edgeopt.engine import Engine, RequestOutput, SamplingParams
from edgeopt.engine.grammar import GrammarCompiler, GrammarSpec
from edgeopt.engine.speculation.step_cost import StepCostModel
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import BOS_ID
from tests.fixtures.speculation_runtimes import ALPHABET, CopyingRuntime, MarkovRuntime

DOCUMENT = ("The invoice 4471 from Acme Tools lists twelve hammers at 9.50 each, shipped to Berlin on May 3. "
            "Payment is due within thirty days; late payment adds two percent. Contact: ops@acme.example. ")
SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}, "city": {"type": "string"}},
          "required": ["id", "city"], "additionalProperties": False}


def prompts(count: int) -> dict[str, list[int]]:
    """Copy-heavy prompts: a document, then a request that starts quoting it."""
    out = {}
    for i in range(count):
        start = (i * 17) % (len(DOCUMENT) - 40)
        text = f"{DOCUMENT}\nRepeat from '{DOCUMENT[start:start + 12]}': {DOCUMENT[start:start + 12 + i % 5]}"
        out[f"r{i}"] = [BOS_ID, *text.encode()]
    return out


class FreeDraftTokens(StepCostModel):
    """A pass whose drafted tokens cost nothing beside its fixed part (a memory-bound device). The fakes' steps
    are mostly Python, whose per-sequence share would price drafts out of a batch of 12; these tests are about
    what verifying drafts does to the output, so every draft that could be accepted is sent."""

    def relative(self, tokens: int) -> float:
        return 1.0


def drafting_freely(engine: Engine) -> Engine:
    if engine._speculation is not None:
        engine._speculation.controller.cost = FreeDraftTokens()
    return engine


def run(speculative: str, requests: dict[str, tuple[list[int], SamplingParams]], runtime_args: dict | None = None,
        **config: object) -> tuple[dict[str, RequestOutput], Engine, CopyingRuntime]:
    runtime = CopyingRuntime(**{"step_delay_s": 0.001, **(runtime_args or {})})
    engine = drafting_freely(make_engine(runtime, speculative=speculative, **config)[0])

    async def body(e: Engine) -> dict[str, RequestOutput]:
        streams = {rid: e.add_request(rid, ids, params) for rid, (ids, params) in requests.items()}
        e.start()
        return dict(zip(streams, await asyncio.gather(*(s.collect() for s in streams.values()))))

    results = run_engine(engine, body, autostart=False)
    assert runtime.violations == []
    return results, engine, runtime


def assert_same(a: dict[str, RequestOutput], b: dict[str, RequestOutput]) -> None:
    for rid in a:
        assert (a[rid].token_ids, a[rid].text, a[rid].finish_reason) == (b[rid].token_ids, b[rid].text,
                                                                       b[rid].finish_reason), rid
        if a[rid].logprobs is not None:
            assert a[rid].logprobs == b[rid].logprobs, rid


def accepted(engine: Engine) -> tuple[int, int]:
    stats = engine.stats()
    return stats.speculative_drafted_total.get("ngram", 0), stats.speculative_accepted_total.get("ngram", 0)


CACHES = {"no-cache": {}, "shared-cells": {"cache_slots": 8}, "copied-cells": {"cache_slots": 8, "shares_kv_cells": False}}
VARIANTS = {
    "plain": SamplingParams(max_tokens=40, temperature=0.0),
    "stop-strings": SamplingParams(max_tokens=40, temperature=0.0, stop=["payment", "Berlin", "7"]),
    "penalties": SamplingParams(max_tokens=40, temperature=0.0, repetition_penalty=1.2, frequency_penalty=0.4,
                                presence_penalty=0.2, logit_bias={ord("e"): -2.0, ord("a"): 1.0}),
    "logprobs": SamplingParams(max_tokens=30, temperature=0.0, logprobs=3),
    "max-tokens-3": SamplingParams(max_tokens=3, temperature=0.0),
}


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_output_is_the_target_s_with_and_without_speculation(cache: str, variant: str) -> None:
    requests = {rid: (ids, VARIANTS[variant]) for rid, ids in prompts(12).items()}
    off, _, _ = run("off", requests, CACHES[cache])
    on, engine, _ = run("ngram", requests, CACHES[cache])
    assert_same(off, on)
    drafted, kept = accepted(engine)
    if variant != "max-tokens-3":
        assert 0 < kept < drafted  # drafts were verified, some taken, some refused


def test_greedy_json_schema_output_is_the_same() -> None:
    runtime = CopyingRuntime()
    grammar = GrammarCompiler(runtime.tokenizer, runtime.info).compile(GrammarSpec.json_schema(SCHEMA))
    text = DOCUMENT + ' As JSON: {"id": "4471", "city": "Berlin"} and again: {"id": "'
    params = SamplingParams(max_tokens=60, temperature=0.0, grammar=grammar)
    requests = {f"j{i}": ([BOS_ID, *text.encode()], dataclasses.replace(params, logprobs=i % 2 or None))
                for i in range(4)}
    off, _, _ = run("off", requests)
    on, engine, _ = run("ngram", requests)
    assert_same(off, on)
    assert accepted(engine)[1] > 0


def test_seeded_sampling_draws_the_same_tokens() -> None:
    """Each emitted token is drawn from its row with the request's generator, in order: same seed, same text."""
    requests = {rid: (ids, SamplingParams(max_tokens=40, temperature=0.8, top_p=0.95, seed=i))
                for i, (rid, ids) in enumerate(prompts(10).items())}
    off, _, _ = run("off", requests)
    on, engine, _ = run("ngram", requests)  # auto leaves seeded draws undrafted (controller: _asks_for_the_same_draw)
    assert_same(off, on)
    assert accepted(engine)[1] > 0


def cached_entries_are_emitted_text(runtime: CopyingRuntime, requests: dict, results: dict) -> None:
    """Every cached prefix is a prefix of some request's prompt + emitted output: no rejected guess got in."""
    texts = [requests[rid][0] + out.token_ids for rid, out in results.items()]
    for tokens in runtime.cached_sequences().values():
        assert any(text[:len(tokens)] == tokens for text in texts), tokens


def test_kv_after_a_soak_is_the_same_as_without_speculation() -> None:
    """One request at a time through a small KV with a prefix cache: the cells left behind, cached prefixes
    included, are exactly what plain decoding leaves."""
    requests = {rid: (ids, SamplingParams(max_tokens=80, temperature=0.0)) for rid, ids in prompts(16).items()}
    runtime_args = {"kv_capacity_tokens": 1200, "max_slots": 1, "cache_slots": 4}
    off, off_engine, off_runtime = run("off", requests, runtime_args)
    on, on_engine, on_runtime = run("ngram", requests, runtime_args)
    assert_same(off, on)
    assert accepted(on_engine)[1] > 0 and on_engine.stats().prefix_cache_evicted_tokens_total > 0
    assert on_runtime.kv_used_tokens == 0 == off_runtime.kv_used_tokens
    assert on_runtime.cached_sequences() == off_runtime.cached_sequences()
    assert on_runtime.kv_cells_total == off_runtime.kv_cells_total == on_engine.stats().kv_cached_tokens


def test_kv_after_a_concurrent_soak_with_preemptions_holds_only_emitted_tokens() -> None:
    """Concurrent requests, preemptions, a prefix cache: which prefixes stay cached depends on timing, which
    speculation changes; what must hold is that the cells are accounted exactly and hold emitted tokens only."""
    requests = {rid: (ids, SamplingParams(max_tokens=150, temperature=0.0)) for rid, ids in prompts(24).items()}
    for shares in (True, False):
        runtime_args = {"kv_capacity_tokens": 1200, "max_slots": 6, "cache_slots": 6, "shares_kv_cells": shares}
        off, _, _ = run("off", requests, runtime_args)
        on, engine, runtime = run("ngram", requests, runtime_args)
        assert_same(off, on)
        assert engine.stats().preemptions_total > 0 and accepted(engine)[1] > 0
        assert runtime.kv_used_tokens == 0 == engine.stats().kv_used_tokens
        assert runtime.kv_cells_total == engine.stats().kv_cached_tokens
        cached_entries_are_emitted_text(runtime, requests, on)
        assert engine.clear_prefix_cache() > 0 and runtime.kv_cells_total == 0


def test_an_abort_mid_speculation_frees_the_drafted_cells() -> None:
    runtime = CopyingRuntime(step_delay_s=0.005)
    engine = drafting_freely(make_engine(runtime, speculative="ngram")[0])
    prompt = prompts(1)["r0"]

    async def body(e: Engine) -> None:
        stream = e.add_request("a", prompt, SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True))
        async for out in stream:
            if len(out.token_ids) > 1 or e.stats().generated_tokens_total > 20:
                break
        e.abort("a")
        while e.stats().running:
            await asyncio.sleep(0.01)

    run_engine(engine, body)
    assert runtime.kv_used_tokens == 0 and engine.stats().kv_used_tokens == 0 and runtime.violations == []


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's test that each row of transition counts follows the row of ``probs``."""
    rows = counts.sum(axis=1) > 0
    expected = counts.sum(axis=1, keepdims=True) * probs
    cells = rows[:, None] & (expected > 0)
    stat = float((((counts - expected) ** 2)[cells] / expected[cells]).sum())
    dof = int(sum(cells[r].sum() - 1 for r in range(len(counts)) if rows[r]))
    return float(chi2.sf(stat, dof))


def test_sampled_tokens_follow_the_target_distribution() -> None:
    runtime = MarkovRuntime(seed=3, step_delay_s=0.001)
    engine = drafting_freely(make_engine(runtime, speculative="ngram")[0])
    temperature = 0.8
    requests = {f"m{i}": [BOS_ID, *b"abcabcabgh" * 3] for i in range(200)}

    async def body(e: Engine) -> dict[str, RequestOutput]:  # seeded per request: the test is reproducible
        streams = {rid: e.add_request(rid, ids, SamplingParams(max_tokens=80, temperature=temperature, seed=i,
                                                               ignore_eos=True))
                   for i, (rid, ids) in enumerate(requests.items())}
        e.start()
        return dict(zip(streams, await asyncio.gather(*(s.collect() for s in streams.values()))))

    results = run_engine(engine, body, autostart=False)
    counts = np.zeros((len(ALPHABET), len(ALPHABET)))
    for rid, out in results.items():
        ids = [requests[rid][-1], *out.token_ids]
        for prev, nxt in zip(ids, ids[1:]):
            counts[ALPHABET.index(prev), ALPHABET.index(nxt)] += 1
    drafted, kept = accepted(engine)
    assert kept > 0.2 * counts.sum() / 2 and kept < drafted  # speculation did most of the work it could
    assert chi_square_p(counts, runtime.probabilities(temperature)) > 1e-3
    # The test has power: the same counts refute a slightly different distribution.
    assert chi_square_p(counts, runtime.probabilities(temperature * 1.3)) < 1e-6
