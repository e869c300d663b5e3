"""Sampler: greedy, temperature, top-k/p, min-p, seeds, penalties, logit_bias on plain numpy rows."""

from __future__ import annotations

import numpy as np

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sampler import sample_next_tokens
from edgeopt.engine.sequence import Sequence


def seq(prompt: list[int] | None = None, output: list[int] | None = None, **params: object) -> Sequence:
    s = Sequence("r", prompt or [0], SamplingParams(**params))  # type: ignore[arg-type]
    s.output_ids = list(output or [])
    return s


def draws(row: np.ndarray, n: int, **params: object) -> list[int]:
    s = seq(**params)
    return [sample_next_tokens(row[None, :], [s])[0] for _ in range(n)]


ROW = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03], dtype=np.float32))


def test_greedy_batch_is_argmax_per_row() -> None:
    logits = np.random.default_rng(0).standard_normal((16, 1000)).astype(np.float32)
    seqs = [seq(temperature=0.0) for _ in range(16)]
    assert sample_next_tokens(logits, seqs) == np.argmax(logits, axis=1).tolist()


def test_truncation_to_one_candidate_is_greedy() -> None:
    for params in (dict(top_k=1), dict(top_p=0.1), dict(min_p=0.9)):
        assert set(draws(ROW, 50, temperature=1.0, seed=1, **params)) == {0}, params


def test_top_k_and_top_p_limit_the_candidates() -> None:
    assert set(draws(ROW, 400, temperature=1.0, top_k=2, seed=2)) == {0, 1}
    assert set(draws(ROW, 400, temperature=1.0, top_p=0.8, seed=3)) == {0, 1, 2}  # 0.5+0.25 < 0.8 <= 0.9
    assert set(draws(ROW, 400, temperature=1.0, min_p=0.25, seed=4)) == {0, 1, 2}  # 0.15/0.5 >= 0.25


def test_temperature_one_follows_the_softmax_distribution() -> None:
    counts = np.bincount(draws(ROW, 4000, temperature=1.0, seed=5), minlength=5) / 4000
    np.testing.assert_allclose(counts, np.exp(ROW), atol=0.03)


def test_a_float32_row_draws_what_the_general_float64_path_draws() -> None:
    """A runtime's float32 row with no penalty, bias or mask takes the sampler's float32 path (three passes over
    the vocabulary); a float64 row takes the general one. Same seed, same draws: the two differ only in the
    last float32 bit of each probability."""
    row = (np.random.default_rng(2).standard_normal(5000) * 4).astype(np.float32)
    for params in ({"temperature": 0.7}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.3, "top_k": 50},
                   {"temperature": 0.5, "min_p": 0.05}, {"temperature": 1e-30}):
        assert draws(row, 300, seed=3, **params) == draws(row.astype(np.float64), 300, seed=3, **params), params


def test_same_seed_same_samples_other_seed_differs() -> None:
    row = np.random.default_rng(1).standard_normal(500).astype(np.float32)
    a = draws(row, 30, temperature=1.0, seed=7)
    assert a == draws(row, 30, temperature=1.0, seed=7)
    assert a != draws(row, 30, temperature=1.0, seed=8)


def test_logit_bias_forces_and_bans_tokens() -> None:
    assert set(draws(ROW, 20, temperature=0.0, logit_bias={4: 100.0})) == {4}
    assert 0 not in draws(ROW, 200, temperature=1.0, seed=1, logit_bias={0: -100.0})


def test_penalties_push_away_from_seen_tokens() -> None:
    row = np.array([2.0, 1.9, 0.0], dtype=np.float32)
    assert sample_next_tokens(row[None], [seq([0], temperature=0.0, repetition_penalty=1.2)]) == [1]
    assert sample_next_tokens(row[None], [seq([2], [0], temperature=0.0, presence_penalty=0.2)]) == [1]
    assert sample_next_tokens(row[None], [seq([2], [0], temperature=0.0, frequency_penalty=0.05)]) == [0]
    assert sample_next_tokens(row[None], [seq([2], [0, 0, 0], temperature=0.0, frequency_penalty=0.05)]) == [1]
    negative = np.array([-1.0, -1.1, -5.0], dtype=np.float32)  # CTRL: negative logits get multiplied
    assert sample_next_tokens(negative[None], [seq([0], temperature=0.0, repetition_penalty=1.2)]) == [1]


def test_mixed_batch_keeps_rows_independent() -> None:
    logits = np.stack([ROW, ROW[::-1].copy()])
    out = sample_next_tokens(logits, [seq(temperature=0.0), seq(temperature=0.0, logit_bias={1: 50.0})])
    assert out == [0, 1]
