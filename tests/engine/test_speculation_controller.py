"""The drafting pieces alone: n-gram lookup, the step-cost fit, and when the controller drafts."""

from __future__ import annotations

import pytest

from edgeopt.engine import SamplingParams
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.speculation import SpeculationController
from edgeopt.engine.speculation.controller import PROBE_EVERY, PROBE_TOKENS, expected_gain
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


def test_failing_guesses_stop_drafting_but_probe_now_and_then() -> None:
    controller = SpeculationController("auto")
    seq = sequence([])
    for _ in range(6):
        controller.record(seq, 3, 0)
    drafts = [controller.propose([seq], 0, 100, 100, False)[0] for _ in range(PROBE_EVERY + 1)]
    assert drafts[:PROBE_EVERY] == [[]] * PROBE_EVERY and len(drafts[PROBE_EVERY]) == PROBE_TOKENS


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
