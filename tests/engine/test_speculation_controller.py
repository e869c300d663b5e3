"""The drafting pieces alone: n-gram lookup, the step-cost fit, and when the controller drafts."""

from __future__ import annotations

import pytest

from edgeopt.engine import SamplingParams
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation import SpeculationController
from edgeopt.engine.speculation.controller import PROBE_EVERY
from edgeopt.engine.speculation.draft_state import expected_gain
from edgeopt.engine.speculation.ngram import NgramIndex
from edgeopt.engine.speculation.step_cost import PRIOR_PER_TOKEN_RATIO, StepCostModel
from edgeopt.errors import ConfigError


def test_ngram_lookup_proposes_what_followed_the_latest_match() -> None:
    index = NgramIndex()
    ids = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6, 2, 3]
    assert index.draft(ids, 3) == [7, 8, 6]  # the latest earlier "2 3" is followed by 7 8 6
    ids += [7, 8]
    assert index.draft(ids, 4) == [6, 2, 3, 7]  # incremental: "7 8" -> what came after it
    assert index.draft([5, 6, 7], 4) == []  # a shorter list rebuilds the index, and finds nothing
    assert NgramIndex().draft(list(range(50)), 5) == []  # nothing repeats


def test_a_sequence_s_lookup_keeps_its_own_copy_of_prompt_and_output() -> None:
    prompt, output = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6], [2, 3]
    index = NgramIndex()
    for token in [7, 8, 6, 2]:
        assert index.draft_sequence(prompt, output, 3) == NgramIndex().draft(prompt + output, 3)
        output.append(token)


def test_longer_matches_win_over_shorter_ones() -> None:
    ids = [9, 2, 3, 10, 4, 2, 3, 11, 9, 2, 3]
    assert NgramIndex().draft(ids, 1) == [10]  # "9 2 3" was followed by 10; the later "2 3" alone by 11


def test_the_step_cost_fit_finds_the_per_token_ratio() -> None:
    cost = StepCostModel()
    assert cost.per_token_ratio() == PRIOR_PER_TOKEN_RATIO
    for _ in range(50):
        cost.observe(1, 0.012)  # one size only: no slope yet
    assert cost.per_token_ratio() == PRIOR_PER_TOKEN_RATIO
    for tokens in [1, 4, 8, 16, 2, 9] * 20:
        cost.observe(tokens, 0.010 + 0.002 * tokens)
    assert cost.per_token_ratio() == pytest.approx(0.002 / 0.010, rel=0.05)


def test_prices_go_stale_with_every_step_of_a_fitted_line() -> None:
    cost = StepCostModel()  # no curve measured at start: the line is refitted every step, long after it settled
    for tokens in [1, 4, 8, 16] * 400:
        cost.observe(tokens, 0.010 + 0.002 * tokens)
    before = cost.prices_version()
    cost.observe(2, 0.050)
    assert cost.prices_version() != before


def sequence(output: list[int], max_tokens: int = 100) -> Sequence:
    seq = Sequence("s", [5, 6, 7, 8, 5, 6, 7, 8, 5, 6], SamplingParams(max_tokens=max_tokens))
    seq.output_ids = output
    return seq


def test_a_lone_stream_drafts_and_a_full_batch_does_not() -> None:
    controller = SpeculationController("ngram")
    for tokens in [1, 2, 4, 8, 16] * 30:  # a pass costs 10 ms + 1.5 ms per token
        controller.observe_step(tokens, 0.010 + 0.0015 * tokens)
    lone = sequence([])
    for _ in range(5):
        controller.record(lone, 4, 4)  # the model keeps agreeing
    [draft] = controller.propose([lone], 0, 100, 100, splits_mixed_lengths=False)
    assert draft[:4] == [7, 8, 5, 6] and len(draft) >= 4
    full = [sequence([]) for _ in range(16)]
    for seq in full:
        for _ in range(5):
            controller.record(seq, 4, 2)
    assert all(d == [] for d in controller.propose(full, 0, 100, 100, splits_mixed_lengths=False))


def test_a_batch_where_no_draft_could_pay_looks_nothing_up() -> None:
    controller = SpeculationController("ngram")
    # SmolLM2 on 2 x86 cores: passes of one sequence timed at start, then steps of 16 sequences served
    controller.cost.set_prior(0.006, 0.6, {1: 0.0100, 2: 0.0141, 3: 0.0183, 5: 0.0276, 8: 0.0398})
    for _ in range(5):
        controller.observe_step(16, 0.090)
    full = [sequence([]) for _ in range(16)]
    for seq in full:
        for _ in range(5):
            controller.record(seq, 4, 4)  # even sequences whose drafts were always taken
    assert all(d == [] for d in controller.propose(full, 0, 100, 100, splits_mixed_lengths=False))
    assert all(seq.draft_state.unsent == [] for seq in full)  # not even the draft to score was looked up
    [lone] = controller.propose([full[0]], 0, 100, 100, splits_mixed_lengths=False)
    assert len(lone) >= 4  # alone, the same sequence drafts


def test_failing_guesses_stop_drafting_and_no_probe_is_verified() -> None:
    controller = SpeculationController("auto")
    seq = sequence([])
    for _ in range(6):
        controller.record(seq, 3, 0)
    drafts = [controller.propose([seq], 0, 100, 100, False)[0] for _ in range(2 * PROBE_EVERY)]
    assert drafts == [[]] * (2 * PROBE_EVERY)  # what it learns instead comes from the draft it was not given
    assert seq.draft_state.unsent == [7, 8, 5, 6]


def test_auto_leaves_a_seeded_sampled_request_undrafted_and_ngram_drafts_it() -> None:
    for mode, drafted in (("auto", False), ("ngram", True)):
        controller = SpeculationController(mode)
        seeded = Sequence("s", [5, 6, 7, 8, 5, 6, 7, 8, 5, 6], SamplingParams(max_tokens=100, temperature=0.7, seed=3))
        greedy = sequence([])
        for seq in (seeded, greedy):
            for _ in range(5):
                controller.record(seq, 4, 4)
        seeded_draft, greedy_draft = controller.propose([seeded, greedy], 0, 100, 100, False)
        assert bool(seeded_draft) is drafted and greedy_draft


def test_limits_bound_a_draft() -> None:
    controller = SpeculationController("ngram")
    seq = sequence([], max_tokens=3)
    for _ in range(5):
        controller.record(seq, 4, 4)
    assert len(controller.propose([seq], 0, 100, 100, False)[0]) == 2  # max_tokens: the 3rd is the model's own
    assert len(controller.propose([sequence([])], 0, 1, 100, False)[0]) == 1  # token room
    assert controller.propose([sequence([]), sequence([])], 0, 100, 100, True) == [[], []]  # mixed lengths split
    assert SpeculationController("off").propose([sequence([])], 0, 100, 100, False) == [[]]


def test_expected_gain_and_an_unknown_mode() -> None:
    assert expected_gain(0.5, 3) == pytest.approx(0.875)
    with pytest.raises(ConfigError, match="'eagle' is not a speculation mode"):
        SpeculationController("eagle")
    with pytest.raises(ConfigError, match="needs a draft model"):  # a mode of its own only with --draft
        SpeculationController("draft")


def test_a_runtime_that_cannot_drop_kv_refuses_ngram_and_runs_auto_without_it() -> None:
    import dataclasses

    from edgeopt.engine.speculation.setup import speculation_for
    from tests.fixtures.fake_runtime import FakeRuntime

    runtime = FakeRuntime()
    runtime.info = dataclasses.replace(runtime.info, trims_kv=False)
    with pytest.raises(ConfigError, match="'ngram' needs a runtime that .* FakeRuntime does not"):
        speculation_for(runtime, "ngram", 1024)
    assert speculation_for(runtime, "auto", 1024) is None and speculation_for(runtime, "off", 1024) is None
    assert speculation_for(FakeRuntime(), "auto", 1024) is not None


def test_a_copy_in_progress_follows_its_source_rather_than_the_latest_match() -> None:
    document = [5, 1, 2, 3, 4, 10, 6, 1, 2, 3, 4, 11]  # "1 2 3 4" twice: followed by 10, then by 11
    index = NgramIndex()
    ids = document + [0, 5, 1]  # the answer starts copying the document from its beginning
    assert index.draft(ids, 2) == [2, 3]
    ids += [2, 3, 4]
    assert index.draft(ids, 2) == [10, 6]  # followed its source; the latest "1 2 3 4" goes on with 11
    assert NgramIndex().draft(ids, 2) == [11, 0]  # a fresh index takes the latest occurrence


def test_a_measured_pass_curve_prices_each_size_and_a_line_stands_in_without_one() -> None:
    cost = StepCostModel()
    cost.set_prior(0.006, 0.6, {1: 0.010, 2: 0.016, 5: 0.026, 8: 0.038})
    assert cost.relative(2) == 0.016 and cost.relative(3) == pytest.approx(0.016 + 0.010 / 3)
    plain = StepCostModel()
    plain.set_prior(0.010, 0.5)
    assert plain.relative(3) == pytest.approx(2.5)  # no curve: the line, 1 + ratio x tokens


# A CPU's pass: the second token costs 0.6 of a pass, each one after ~0.33 (SmolLM2-135M on 2 x86 cores).
CPU_CURVE = {1: 0.010, 2: 0.016, 3: 0.0193, 5: 0.026, 8: 0.0366}
DOCUMENT = list(range(100, 160))


def copying_until_drafted(controller: SpeculationController, seq: Sequence, text: list[int]) -> int | None:
    """Steps of emitting ``text`` a token at a time until the controller drafts; None if it never does."""
    for step, token in enumerate(text):
        if controller.propose([seq], 0, 100, 100, False)[0]:
            return step
        seq.output_ids.append(token)
    return None


def test_a_sequence_that_turns_to_copying_drafts_before_its_next_probe() -> None:
    """Drafts it was not given are scored against what it emits: at an acceptance where drafting does not pay,
    it notices a quote within a few tokens, where a probe every PROBE_EVERY steps took up to that long."""
    controller = SpeculationController("ngram")
    controller.cost.set_prior(0.006, 0.6, CPU_CURVE)
    seq = Sequence("s", DOCUMENT + [1, 2, 3], SamplingParams(max_tokens=200))
    first = copying_until_drafted(controller, seq, DOCUMENT)
    assert first is not None and first < PROBE_EVERY // 2
    assert controller.propose([seq], 0, 100, 100, False)[0][:3] == DOCUMENT[first:first + 3]


def test_text_that_the_lookup_does_not_predict_keeps_drafting_off() -> None:
    controller = SpeculationController("ngram")
    controller.cost.set_prior(0.006, 0.6, CPU_CURVE)
    # The text repeats its own phrases (the lookup keeps finding matches) but never goes on as they did.
    text = [t for i in range(12) for t in (7, 8, 200 + i)]
    seq = Sequence("s", [7, 8, 9, 7, 8, 10], SamplingParams(max_tokens=200))
    before = controller._state(seq).acceptance
    assert copying_until_drafted(controller, seq, text[:PROBE_EVERY]) is None
    assert controller._state(seq).acceptance < before


def test_free_text_is_looked_up_only_now_and_then_and_sleeps_between() -> None:
    """Text the lookup never predicts: each miss puts the sequence to sleep for a few tokens (nothing that
    decides its drafting changes meanwhile), so most steps cost the engine a comparison, not a lookup."""
    controller = SpeculationController("ngram")
    controller.cost.set_prior(0.006, 0.6, CPU_CURVE)
    seq = Sequence("s", [7, 8, 9, 7, 8, 10], SamplingParams(max_tokens=200))
    lookups = 0
    index = controller._state(seq).index
    lookup = index.draft_sequence

    def counted(*args: object) -> list[int]:
        nonlocal lookups
        lookups += 1
        return lookup(*args)  # type: ignore[arg-type]

    index.draft_sequence = counted  # type: ignore[method-assign]
    asleep = 0
    for token in range(1000, 1060):  # never seen before: every lookup misses
        asleep += controller.asleep(seq)
        assert controller.propose([seq], 0, 100, 100, False) == [[]]
        seq.output_ids.append(token)
    assert 5 <= lookups <= 60 // 4 + 2  # thinned out, but it keeps looking
    assert asleep >= 60 - lookups - 2


def test_a_request_auto_never_drafts_sleeps_for_good() -> None:
    def seeded() -> Sequence:
        return Sequence("s", [5, 6, 7, 8, 5, 6, 7, 8, 5, 6], SamplingParams(max_tokens=100, temperature=0.7, seed=3))

    controller = SpeculationController("auto")
    assert controller.asleep(seeded())  # decided on first sight, before any lookup
    assert not SpeculationController("ngram").asleep(seeded())
    assert not controller.asleep(sequence([]))
