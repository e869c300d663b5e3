"""length_sorted_batches: every input once, sorted, padding and size bounds respected."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.server.batching.length_batches import length_sorted_batches


def _padded_and_real(lengths: list[int], batch: list[int]) -> tuple[int, int]:
    return len(batch) * max(lengths[i] for i in batch), sum(lengths[i] for i in batch)


@pytest.mark.parametrize("seed", range(5))
def test_bounds_hold_on_random_lengths(seed: int) -> None:
    lengths = np.random.default_rng(seed).integers(1, 129, size=200).tolist()
    batches = length_sorted_batches(lengths, max_tokens=1024, max_padding=0.25)
    assert sorted(i for b in batches for i in b) == list(range(200))
    for batch in batches:
        padded, real = _padded_and_real(lengths, batch)
        assert [lengths[i] for i in batch] == sorted(lengths[i] for i in batch)
        if len(batch) > 1:  # a single input is never split, whatever its length
            assert padded <= 1024 and padded <= 1.25 * real


def test_equal_lengths_fill_batches_up_to_the_token_limit() -> None:
    assert [len(b) for b in length_sorted_batches([32] * 100, max_tokens=512)] == [16] * 6 + [4]


def test_a_long_input_does_not_drag_short_ones_into_padding() -> None:
    lengths = [10, 11, 10, 120, 12]
    batches = length_sorted_batches(lengths, max_tokens=2048)
    assert [3] in batches and sorted(next(b for b in batches if 0 in b)) == [0, 1, 2, 4]


def test_an_input_longer_than_the_limit_gets_its_own_batch() -> None:
    assert length_sorted_batches([5, 300, 5], max_tokens=256) == [[0, 2], [1]]
    assert length_sorted_batches([]) == []
