"""Masks that wait for the pick (edgeopt.engine.constraint): greedy and plain-temperature rows are drawn
unmasked, their grammar checks the pick, and only refused rows get a mask and are drawn again. That must
change nothing but the cost: the check agrees with the mask bit for every token, greedy outputs equal the
eager path's over 50 schemas, and temperature draws follow the masked distribution."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import llguidance.numpy as llnp
from edgeopt.engine import SamplingParams
from edgeopt.engine import constraint as constraint_module
from edgeopt.engine.constraint import PROBE_EVERY, TokenConstraint
from edgeopt.engine.grammar import GrammarCompiler, GrammarSpec
from edgeopt.engine.sampler import mask_can_wait
from edgeopt.engine.token_bitmask import allowed_tokens
from edgeopt.runtimes.base import StepInput
from tests.engine.helpers import make_engine
from tests.engine.test_grammar import PROMPT, generate
from tests.fixtures.fake_runtime import BOS_ID, EOS_ID, VOCAB_SIZE, FakeRuntime
from tests.fixtures.json_schemas import random_schemas

# The chi-square statistic's 0.999 quantile with 3 degrees of freedom (4 allowed tokens): a correct
# sampler exceeds it once in 1000 seeds; the draws below are seeded, so the test is deterministic.
CHI2_3DF_999 = 16.266


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    runtime = FakeRuntime()
    # Two end-of-generation ids, as Qwen / Llama 3 declare: both are allowed once the grammar accepts.
    return GrammarCompiler(runtime.tokenizer, dataclasses.replace(runtime.info, eos_token_ids=frozenset({EOS_ID,
                                                                                                          BOS_ID})))


def mask_of(constraint: TokenConstraint) -> np.ndarray:
    bitmask = llnp.allocate_token_bitmask(1, VOCAB_SIZE)
    llnp.fill_next_token_bitmask(constraint.matcher, bitmask, 0)
    return allowed_tokens(bitmask[0], VOCAB_SIZE)


@pytest.mark.parametrize("spec", [
    *(GrammarSpec.json_schema(schema) for schema in random_schemas(12, seed=3)),
    GrammarSpec.lark('start: "<call>" args "</call>"\nargs: %json {"type": "object", "properties": '
                     '{"city": {"type": "string", "maxLength": 6}}, "required": ["city"]}'),
    GrammarSpec.regex(r"(yes|no)( [0-9]{1,3})?"),
], ids=lambda spec: spec.kind)
def test_the_pick_check_agrees_with_the_mask_bit_for_every_token(compiler: GrammarCompiler, spec: GrammarSpec) -> None:
    """Every token, in every state along a random completion (the finished one too): allows(t) == the mask's
    bit t, end-of-generation ids included, which llguidance's validate_tokens alone refuses even where the
    grammar accepts."""
    constraint = TokenConstraint(compiler.compile(spec))
    rng = np.random.default_rng(0)
    accepting_states = 0
    while True:
        mask = mask_of(constraint)
        checked = np.array([constraint.allows(t) for t in range(VOCAB_SIZE)])
        assert np.array_equal(checked, mask), np.flatnonzero(checked != mask)
        accepting_states += int(mask[EOS_ID] and mask[BOS_ID])
        if constraint.is_finished:
            break
        choices = np.flatnonzero(mask)
        choices = choices[choices != EOS_ID] if len(choices) > 1 else choices  # walk on through the grammar
        constraint.advance(int(rng.choice(choices)))
    assert accepting_states  # the end-of-generation rule was exercised


def test_which_rows_wait_for_their_pick() -> None:
    assert mask_can_wait(SamplingParams(temperature=0.0)) and mask_can_wait(SamplingParams(temperature=0.8))
    assert mask_can_wait(SamplingParams(temperature=0.0, top_k=5, repetition_penalty=1.3, logit_bias={1: 2.0}))
    for needs_the_mask in (SamplingParams(temperature=0.8, top_k=5), SamplingParams(temperature=0.8, top_p=0.9),
                           SamplingParams(temperature=0.8, min_p=0.1), SamplingParams(temperature=0.0, logprobs=0)):
        assert not mask_can_wait(needs_the_mask)


@pytest.mark.parametrize("adaptive", [False, True], ids=["every-pick-checked", "adaptive"])
def test_greedy_outputs_are_the_same_with_waiting_and_eager_masks(compiler: GrammarCompiler, adaptive: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 50 schemas twice: with logprobs (eager masks, computed beside the forward pass) and without
    (picks checked after sampling; every pick, or as TokenConstraint.plan_step decides: the fake model's
    picks are mostly refused, so its sequences soon go eager and check every 8th pick). Half the requests
    carry a repetition penalty (the pick is made on processed logits). A refused pick kept, or an allowed
    one redrawn, changes the text."""
    if not adaptive:
        monkeypatch.setattr(constraint_module, "EAGER_ABOVE_REFUSED_SHARE", 1.0)
    schemas = random_schemas(50, seed=11, numbers=False)

    def params(i: int, logprobs: int | None) -> SamplingParams:
        return SamplingParams(max_tokens=300, temperature=0.0, logprobs=logprobs,
                              repetition_penalty=1.3 if i % 2 else 1.0,
                              grammar=compiler.compile(GrammarSpec.json_schema(schemas[i])))

    eager_engine, _ = make_engine()
    eager = generate(eager_engine, {f"r{i}": (PROMPT, params(i, 0)) for i in range(len(schemas))})
    lazy_engine, _ = make_engine()
    lazy = generate(lazy_engine, {f"r{i}": (PROMPT, params(i, None)) for i in range(len(schemas))})
    for rid, out in lazy.items():
        assert out.finish_reason == "stop", (rid, out.error)
        assert out.token_ids == eager[rid].token_ids, rid
    lazy_stats, eager_stats = lazy_engine.stats(), eager_engine.stats()
    assert eager_stats.grammar_checked_total == 0  # every eager row had its mask before sampling
    # Both branches ran: picks kept as drawn, and refused picks drawn again under their mask.
    assert 0 < lazy_stats.grammar_refused_total < lazy_stats.grammar_checked_total
    tokens = sum(out.completion_tokens for out in lazy.values())
    if adaptive:
        assert lazy_stats.grammar_checked_total < tokens / 2
    else:
        assert lazy_stats.grammar_checked_total == tokens
    assert lazy_stats.grammar_redo_seconds_total > 0 and eager_stats.grammar_redo_seconds_total == 0


def test_temperature_draws_follow_the_masked_distribution(compiler: GrammarCompiler) -> None:
    """One constrained token per request, 3000 seeds. The grammar allows the 2nd-5th most likely tokens of
    the prompt's next-token distribution, so the most likely token (~65%) is always refused: a draw is
    kept when allowed and redone under the mask otherwise, and the counts must fit p(t) / p(allowed)."""
    temperature, draws = 2.0, 3000
    row = FakeRuntime().step([StepInput(0, PROMPT, 0, True, False)])[0].astype(np.float64)
    probs = np.exp((row - row.max()) / temperature)
    probs /= probs.sum()
    allowed = [int(t) for t in np.argsort(-probs) if chr(t).isalnum()][1:5]
    grammar = compiler.compile(GrammarSpec.regex("|".join(re.escape(chr(t)) for t in allowed)))
    engine, _ = make_engine(max_waiting=draws)
    results = generate(engine, {f"s{seed}": (PROMPT, SamplingParams(max_tokens=1, temperature=temperature,
                                                                    seed=seed, grammar=grammar))
                                for seed in range(draws)})
    picks = [out.token_ids[0] for out in results.values()]
    assert set(picks) <= set(allowed)
    observed = np.array([picks.count(t) for t in allowed])
    expected = probs[allowed] / probs[allowed].sum() * draws
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_3DF_999, (observed, expected.round(1), chi2)
    stats = engine.stats()
    assert stats.grammar_checked_total == draws
    refused_share = stats.grammar_refused_total / draws
    assert abs(refused_share - (1 - probs[allowed].sum())) < 0.05  # the unmasked draws did land outside


def test_a_sequence_whose_picks_keep_being_refused_gets_its_masks_beside_the_forward(compiler: GrammarCompiler) -> None:
    """Three refusals in a row switch a sequence to eager masks, with a checked pick every PROBE_EVERY-th
    step; agreeing picks switch it back. Rows where a checked pick would not be exact never check."""
    constraint = TokenConstraint(compiler.compile(GrammarSpec.json_object()))
    assert not constraint.plan_step(exact_unmasked=False)
    for _ in range(2):
        assert constraint.plan_step(exact_unmasked=True)
        constraint.record_check(False)
    assert constraint.plan_step(exact_unmasked=True)  # two refusals in a row are not enough ...
    constraint.record_check(False)  # ... the third is
    eager_run = [constraint.plan_step(exact_unmasked=True) for _ in range(2 * PROBE_EVERY)]
    assert eager_run == ([False] * (PROBE_EVERY - 1) + [True]) * 2  # probes: the pick is still refused ...
    constraint.record_check(True)  # ... until picks agree with the grammar again
    assert constraint.plan_step(exact_unmasked=True) and constraint.checks_pick
