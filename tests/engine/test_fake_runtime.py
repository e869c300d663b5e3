"""The fake runtime itself: deterministic, chunking-invariant, and strict about the contract."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.runtimes.base import StepInput
from tests.fixtures.fake_runtime import EOS_ID, ContractViolation, FakeRuntime


def test_logits_do_not_depend_on_chunking_or_batch_company() -> None:
    rt = FakeRuntime(max_slots=4)
    prompt = rt.tokenizer.encode("hello world, chunked")
    whole = rt.step([StepInput(0, prompt, 0, True)])[0]
    rt.step([StepInput(1, prompt[:5], 0, False), StepInput(2, [65, 66], 0, True)])
    chunked = rt.step([StepInput(2, [67], 2, True), StepInput(1, prompt[5:], 5, True)])[1]
    np.testing.assert_array_equal(whole, chunked)
    assert rt.kv_used_tokens == 2 * len(prompt) + 3


def test_greedy_reference_matches_manual_decode() -> None:
    rt = FakeRuntime()
    prompt = rt.tokenizer.encode("abc")
    expected = rt.greedy_reference(prompt, 8)
    logits = rt.step([StepInput(0, prompt, 0, True)])
    got = []
    for i in range(8):
        token = int(np.argmax(logits[0]))
        got.append(token)
        logits = rt.step([StepInput(0, [token], len(prompt) + i, True)])
    assert got == expected and EOS_ID not in got
    assert all(32 <= t < 127 or t == 10 for t in got)


@pytest.mark.parametrize("batch, message", [
    ([StepInput(9, [1], 0, True)], "outside"),
    ([StepInput(0, [1], 3, True)], "start_pos 3"),
    ([StepInput(0, [1], 0, True), StepInput(0, [2], 1, True)], "twice"),
    ([StepInput(0, list(range(20)), 0, True)], "KV overflow"),
    ([], "empty batch"),
])
def test_contract_violations_raise_and_are_recorded(batch: list[StepInput], message: str) -> None:
    rt = FakeRuntime(kv_capacity_tokens=16, max_slots=2)
    with pytest.raises(ContractViolation, match=message):
        rt.step(batch)
    assert rt.violations and message in rt.violations[0]


def test_release_frees_the_slot() -> None:
    rt = FakeRuntime(kv_capacity_tokens=8, max_slots=2)
    rt.step([StepInput(0, [1, 2, 3, 4, 5, 6], 0, True)])
    rt.release(0)
    assert rt.kv_used_tokens == 0
    rt.step([StepInput(0, [1, 2, 3, 4, 5, 6], 0, True)])  # position 0 again after release
