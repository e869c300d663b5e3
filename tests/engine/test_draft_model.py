"""Speculative decoding with a draft model (fake runtimes as target and draft): greedy output is the target's
own, sampled tokens follow the target's distribution whatever the draft's (chi-square, with power against the
draft's own distribution), the draft's KV follows each sequence, a failing draft costs only its drafts, and a
draft with another vocabulary or too few sequences is refused."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from edgeopt.engine import Engine, EngineConfig, RequestOutput, SamplingParams
from edgeopt.engine.sampler import sample_row
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation.distribution import sampling_distribution
from edgeopt.engine.speculation.draft_model import DraftModel
from edgeopt.engine.speculation.draft_vocab import check_same_vocabulary
from edgeopt.errors import ConfigError
from tests.engine.helpers import run_engine
from tests.engine.test_speculation import chi_square_p
from tests.fixtures.fake_runtime import BOS_ID, ByteTokenizer, FakeRuntime
from tests.fixtures.speculation_runtimes import ALPHABET, MarkovRuntime


def serve(target: FakeRuntime, draft: FakeRuntime | None, requests: dict[str, tuple[list[int], SamplingParams]],
          draft_tokens: int = 4, mode: str = "draft",
          relative_cost: float = 1.0) -> tuple[dict[str, RequestOutput], Engine, DraftModel | None]:
    model = DraftModel(draft, draft_tokens, relative_cost=relative_cost) if draft is not None else None
    config = EngineConfig(kv_capacity_tokens=target.info.kv_capacity_tokens, max_running=target.info.max_slots,
                          context_length=target.info.context_length, speculative=mode if model else "off")
    engine = Engine(target, config, model)

    async def body(e: Engine) -> dict[str, RequestOutput]:
        streams = {rid: e.add_request(rid, ids, params) for rid, (ids, params) in requests.items()}
        e.start()
        return dict(zip(streams, await asyncio.gather(*(s.collect() for s in streams.values()))))

    results = run_engine(engine, body, autostart=False)
    assert target.violations == [] and (draft is None or draft.violations == [])
    return results, engine, model


def counts_of(engine: Engine) -> tuple[int, int]:
    stats = engine.stats()
    return stats.speculative_drafted_total.get("draft", 0), stats.speculative_accepted_total.get("draft", 0)


@pytest.mark.parametrize("draft_seed", [0, 7])  # 0: the target's own weights (all agree); 7: another model
def test_greedy_output_is_the_target_s_own_with_several_sequences(draft_seed: int) -> None:
    prompts = {f"r{i}": [BOS_ID, *f"request {i}: the quick brown fox".encode()] for i in range(6)}
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    target = FakeRuntime(max_slots=4, cache_slots=4)
    results, engine, model = serve(target, FakeRuntime(max_slots=4, seed=draft_seed),
                                   {rid: (ids, greedy) for rid, ids in prompts.items()})
    for rid, ids in prompts.items():
        assert results[rid].token_ids == target.greedy_reference(ids, 40, stop_at_eos=False), rid
    drafted, kept = counts_of(engine)
    assert drafted > 0 and model is not None and model.failures == 0
    if draft_seed == 0:
        assert kept == drafted  # the draft is the target: every guess verified
    else:
        assert kept < drafted
    assert target.kv_used_tokens == 0 and engine.stats().kv_used_tokens == 0  # rejected guesses left no KV


def test_the_draft_kv_holds_each_sequence_s_tokens_it_was_fed() -> None:
    """After the run, each draft slot holds a prefix of its last sequence's tokens (trimmed on rejection):
    never a rejected guess followed by more tokens."""
    prompts = {f"r{i}": [BOS_ID, *f"prompt number {i}".encode()] for i in range(3)}
    target, draft = FakeRuntime(max_slots=3, cache_slots=3), FakeRuntime(max_slots=3, seed=5)
    greedy = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    results, _, _ = serve(target, draft, {rid: (ids, greedy) for rid, ids in prompts.items()})
    finals = [prompts[rid] + results[rid].token_ids for rid in prompts]
    for slot in range(3):
        held = draft.slot_tokens(slot)
        assert held and any(final[:len(held)] == held for final in finals), slot


class FailingRuntime(FakeRuntime):
    def step(self, batch):  # type: ignore[no-untyped-def]
        raise RuntimeError("draft device lost")


def test_a_failing_draft_costs_only_its_drafts() -> None:
    prompts = {f"r{i}": [BOS_ID, *f"text {i}".encode()] for i in range(2)}
    target = FakeRuntime(max_slots=2, cache_slots=2)
    greedy = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    results, engine, model = serve(target, FailingRuntime(max_slots=2), {r: (ids, greedy) for r, ids in prompts.items()})
    for rid, ids in prompts.items():
        assert results[rid].token_ids == target.greedy_reference(ids, 20, stop_at_eos=False)
    assert model is not None and model.failures > 0 and counts_of(engine) == (0, 0)


def test_sampled_tokens_follow_the_target_distribution_not_the_draft_s() -> None:
    """The draft (another Markov chain) proposes from its q; min(1, p/q) and the residual norm(max(0, p - q))
    must leave the target's p. The counts are also tested against the draft's q (what accepting every guess
    would give) and a nearby p: both must be refuted, so the test can fail."""
    target, draft = MarkovRuntime(seed=3, max_slots=16, cache_slots=16), MarkovRuntime(seed=11, max_slots=16)
    draft.transitions = 0.3 * draft.transitions + 0.7 * target.transitions  # related, as a real draft is
    temperature = 0.8
    requests = {f"m{i}": ([BOS_ID, *b"abcabcabgh" * 3],
                          SamplingParams(max_tokens=60, temperature=temperature, seed=i, ignore_eos=True))
                for i in range(160)}
    results, engine, _ = serve(target, draft, requests)
    counts = np.zeros((len(ALPHABET), len(ALPHABET)))
    for rid, out in results.items():
        ids = [requests[rid][0][-1], *out.token_ids]
        for prev, nxt in zip(ids, ids[1:]):
            counts[ALPHABET.index(prev), ALPHABET.index(nxt)] += 1
    drafted, kept = counts_of(engine)
    assert 0.25 * drafted < kept < drafted  # the draft did real work, and was refused at times
    assert chi_square_p(counts, target.probabilities(temperature)) > 1e-3
    assert chi_square_p(counts, draft.probabilities(temperature)) < 1e-6
    assert chi_square_p(counts, target.probabilities(temperature * 1.3)) < 1e-6


@pytest.mark.parametrize("params", [dict(temperature=0.7), dict(temperature=1.0, top_k=5),
                                    dict(temperature=0.9, top_p=0.8), dict(temperature=1.2, min_p=0.1),
                                    dict(temperature=0.8, presence_penalty=1.5, logit_bias={7: 2.0})])
def test_the_acceptance_rule_uses_exactly_the_sampler_s_distribution(params: dict) -> None:
    """sampling_distribution is what sample_row draws from (chi-square over 20,000 draws)."""
    rng = np.random.default_rng(1)
    row = rng.normal(0.0, 2.0, size=12).astype(np.float32)
    seq = Sequence("s", [1, 2, 7], SamplingParams(max_tokens=4, seed=5, **params))
    seq.output_ids = [7, 3]
    probs = sampling_distribution(row, seq)
    draws = np.bincount([sample_row(row, seq) for _ in range(20_000)], minlength=12)
    assert chi_square_p(draws[None, :], probs[None, :]) > 1e-3
    assert np.all(draws[probs == 0] == 0)  # what the rule gives no mass, the sampler never draws


class RenamedTokenizer(ByteTokenizer):
    def token_bytes(self, token_id: int) -> bytes:
        return b"!" if token_id == 65 else super().token_bytes(token_id)


def test_a_draft_with_another_vocabulary_is_refused() -> None:
    renamed = FakeRuntime()
    renamed.tokenizer = RenamedTokenizer()
    with pytest.raises(ConfigError) as same_size:
        check_same_vocabulary(FakeRuntime(), renamed, "target.gguf", "draft.gguf")
    assert "draft.gguf" in str(same_size.value) and "target.gguf" in str(same_size.value)
    assert "token 65" in str(same_size.value) and "b'A'" in str(same_size.value)
    assert "same tokenizer" in same_size.value.hint
    check_same_vocabulary(FakeRuntime(), FakeRuntime(seed=3), "a", "b")  # the same vocabulary passes


def test_a_draft_holding_fewer_sequences_than_the_engine_runs_is_refused() -> None:
    target = FakeRuntime(max_slots=4, cache_slots=4)
    config = EngineConfig(kv_capacity_tokens=4096, max_running=4, context_length=1024, speculative="draft")
    with pytest.raises(ConfigError, match="holds 2 sequences and the engine runs 4"):
        Engine(target, config, DraftModel(FakeRuntime(max_slots=2)))
    with pytest.raises(ConfigError, match="needs a draft model"):
        Engine(target, config)
    with pytest.raises(ConfigError, match="--speculative ngram"):
        Engine(target, EngineConfig(kv_capacity_tokens=4096, max_running=4, context_length=1024,
                                    speculative="ngram"), DraftModel(FakeRuntime(max_slots=4)))


def test_preempted_sequences_draft_again_from_their_new_slots() -> None:
    """A KV cache too small for every sequence preempts some; they recompute in whatever slot is free, and their
    draft slots start again (a slot that changed hands is emptied): the output is still the target's."""
    prompts = {f"r{i}": [BOS_ID, *f"sequence {i} goes on and on".encode()] for i in range(5)}
    target = FakeRuntime(kv_capacity_tokens=160, max_slots=4, cache_slots=0)
    greedy = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    results, engine, model = serve(target, FakeRuntime(max_slots=4, seed=0), {r: (ids, greedy) for r, ids in prompts.items()})
    for rid, ids in prompts.items():
        assert results[rid].token_ids == target.greedy_reference(ids, 30, stop_at_eos=False), rid
    assert engine.stats().preemptions_total > 0 and model is not None and model.failures == 0
    assert counts_of(engine)[1] > 0


def test_auto_drafts_where_the_draft_pays_and_only_probes_where_it_does_not() -> None:
    """auto weighs the draft's passes against the target's (a small draft's size says it is cheap until its passes
    are timed): a draft that is free and always right drafts every step; one ten times slower than the target's
    pass that is mostly wrong stops after its first tries and then does not even probe. Both give the target's
    own greedy output."""
    prompt = [BOS_ID, *b"auto mode decides"]
    greedy = SamplingParams(max_tokens=80, temperature=0.0, ignore_eos=True)
    pays = FakeRuntime(max_slots=1, cache_slots=1, step_delay_s=0.004)
    results, engine, _ = serve(pays, FakeRuntime(max_slots=1, seed=0), {"r": (prompt, greedy)}, mode="auto",
                               relative_cost=0.05)
    assert results["r"].token_ids == pays.greedy_reference(prompt, 80, stop_at_eos=False)
    assert counts_of(engine)[1] > 40  # most tokens came from verified drafts
    costs = FakeRuntime(max_slots=1, cache_slots=1, step_delay_s=0.002)
    slow = FakeRuntime(max_slots=1, seed=7, step_delay_s=0.02)
    results, engine, model = serve(costs, slow, {"r": (prompt, greedy)}, mode="auto", relative_cost=0.05)
    assert results["r"].token_ids == costs.greedy_reference(prompt, 80, stop_at_eos=False)
    drafted, _ = counts_of(engine)
    assert model is not None and model.pass_seconds is not None and model.pass_seconds >= 0.02
    assert 0 < drafted <= 8  # its first tries (it looked cheap), then nothing: a probe would cost too much
