"""A draft's acceptance: greedy speculation replayed over whether the draft predicts each of the target's tokens
(hand-counted cases), and the measurement end to end, where a draft that is the target itself (its F16 GGUF)
predicts nearly every greedy token of the target in float32, so an off-by-one between the draft's rows and the
target's tokens would show as agreement near zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.evaluation.draft import Replay, held_out_contexts, measure_acceptance, replay, summarize
from edgeopt.errors import EvaluationError
from edgeopt.sources.model_source import open_model_source


def test_a_draft_that_predicts_everything_is_accepted_whole() -> None:
    # 10 tokens, k 4: each step keeps 4 guesses and adds the target's own token, so 2 steps of 5
    assert replay([True] * 10, 4) == Replay(4, steps=2, drafted=8, accepted=8, emitted=10)


def test_a_draft_that_predicts_nothing_costs_a_step_a_token() -> None:
    # every step proposes min(k, tokens left): 4, 4, 4, 4, 4, 4, 4, 3, 2, 1
    result = replay([False] * 10, 4)
    assert (result.steps, result.drafted, result.accepted, result.emitted) == (10, 34, 0, 10)
    assert result.acceptance == 0 and result.tokens_per_step == 1


def test_acceptance_stops_at_the_first_miss() -> None:
    matches = [True, True, False, True, True, True, True, True, False]
    # step 1 at 0: keeps 0, 1, misses 2 -> emits 3 (two guesses + the target's token at 2)
    # step 2 at 3: keeps 3..6 (all 4) -> emits 5, at 8: step 3 proposes 1 (8), misses -> emits 1
    result = replay(matches, 4)
    assert result == Replay(4, steps=3, drafted=9, accepted=6, emitted=9)
    # k 1: a kept guess and the target's token after it: 0 kept (+1), 2 missed, 3 (+4), 5 (+6), 7 (+8)
    assert replay(matches, 1) == Replay(1, steps=5, drafted=5, accepted=4, emitted=9)


def test_summary_reports_the_served_draft_length_and_others() -> None:
    summary = summarize([[True, True, False, True], [False, False]])
    assert summary["target_tokens"] == 6 and summary["token_agreement"] == 0.5 and summary["draft_tokens"] == 4
    assert set(summary["by_draft_tokens"]) == {"1", "2", "4", "8"}
    four = replay([True, True, False, True], 4) + replay([False, False], 4)
    assert summary["acceptance"] == round(four.acceptance, 4)
    assert summary["tokens_per_step"] == round(four.tokens_per_step, 4)


def test_contexts_come_from_the_held_out_tail(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from edgeopt.passes.distil_data import split_tokens

    data = tmp_path / "data.txt"
    data.write_text("alpha beta gamma delta. " * 400)
    contexts, source = held_out_contexts(tiny_llama_dir, None, data, count=3, length=16)
    held = split_tokens(tiny_llama_dir, data, 8192)[1].tolist()
    assert source == "data.txt (held-out tail)" and contexts == [held[0:16], held[16:32], held[32:48]]
    with pytest.raises(EvaluationError, match="fewer than one context of 10000"):
        held_out_contexts(tiny_llama_dir, None, data, length=10_000)


def test_the_target_as_its_own_draft_is_accepted_almost_always(tiny_llama_dir: Path, tiny_gguf_factory,
                                                               tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    from edgeopt.demo.corpus import stdlib_text

    data.write_text(stdlib_text(30_000))
    itself = open_model_source(tiny_gguf_factory("llama-gqa", "F16"))
    measured = measure_acceptance(itself.bundle_dir, itself.manifest, tiny_llama_dir, None, data, new_tokens=16)
    assert measured["contexts"] > 4 and measured["target_tokens"] > 50
    assert measured["token_agreement"] >= 0.95 and measured["acceptance"] >= 0.9
    assert measured["by_draft_tokens"]["8"]["tokens_per_step"] > 4
