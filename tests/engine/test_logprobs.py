"""The logprob arithmetic (edgeopt.engine.logprobs) and the refusal of echo logprobs a runtime cannot give."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from edgeopt.engine import SamplingParams
from edgeopt.engine.logprobs import extend_prompt_logprobs, log_softmax, token_logprob
from edgeopt.engine.validation import check_runtime_supports
from edgeopt.errors import RequestError
from tests.fixtures.fake_runtime import FakeRuntime


def test_log_softmax_normalises_and_keeps_masked_tokens_impossible() -> None:
    row = np.array([2.0, -np.inf, 0.5, 2.0], dtype=np.float32)
    out = log_softmax(row)
    assert out[1] == -np.inf and math.isclose(math.fsum(np.exp(out)), 1.0, rel_tol=1e-12)
    assert np.allclose(out[[0, 2, 3]], row[[0, 2, 3]] - np.log(np.exp(row[[0, 2, 3]].astype(np.float64)).sum()))


def test_top_entries_are_sorted_ties_by_id_and_never_list_impossible_tokens() -> None:
    logprobs = log_softmax(np.array([1.0, 3.0, 1.0, -np.inf, 3.0]))
    entry = token_logprob(logprobs, 2, top=5)
    assert [t for t, _ in entry.top] == [1, 4, 0, 2]  # 3 is impossible: four entries, not five
    assert entry.logprob == dict(entry.top)[2]
    assert token_logprob(logprobs, 2, top=0).top == ()


def test_prompt_logprobs_accumulate_across_chunks_and_ignore_repeats() -> None:
    prompt = [5, 6, 7, 8]
    rows = np.log(np.full((4, 10), 0.1))
    entries: list = [None]
    extend_prompt_logprobs(entries, prompt, 0, rows[:2], top=1)  # rows after tokens 0, 1: score tokens 1, 2
    extend_prompt_logprobs(entries, prompt, 0, rows[:2], top=1)  # recomputed after a preemption: no repeats
    extend_prompt_logprobs(entries, prompt, 2, rows[2:], top=1)  # the last row predicts the first output
    assert [e.token_id for e in entries[1:]] == [6, 7, 8] and len(entries) == len(prompt)


def test_echo_logprobs_on_a_runtime_without_position_logits_is_a_400() -> None:
    info = dataclasses.replace(FakeRuntime().info, position_logits=False)
    with pytest.raises(RequestError) as caught:
        check_runtime_supports(SamplingParams(prompt_logprobs=0), info)
    assert caught.value.param == "echo" and "every prompt position" in str(caught.value)
    check_runtime_supports(SamplingParams(logprobs=5), info)  # generated-token logprobs need nothing more
