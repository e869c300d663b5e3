"""The sampler is total: any logits (NaN, +-inf, huge, subnormal) and any parameter at or past its bounds
give a valid token id of the row, never an exception (issue 12, item 1: one request stopped the engine)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sampler import sample_next_tokens
from edgeopt.engine.sequence import Sequence

TINY = 5e-324  # the smallest positive float64 (subnormal): x / TINY overflows for any |x| > ~1e-16
ODD_FLOATS = [0.0, -0.0, TINY, 1e-300, 1e-8, 0.5, 1.0, 2.0, 1e308, float("inf"), float("-inf"), float("nan")]


def at_bounds_or_between(low: float, high: float) -> st.SearchStrategy[float]:
    """The documented range's ends, the odd values every float parameter can be sent, and the range."""
    return st.one_of(st.sampled_from([low, high, *ODD_FLOATS]), st.floats(low, high))


def logit_rows(vocab: int) -> st.SearchStrategy[np.ndarray]:
    finite_or_not = st.one_of(st.floats(width=32), st.sampled_from([np.inf, -np.inf, np.nan, 3.4e38, -3.4e38]))
    return st.one_of(hnp.arrays(np.float32, vocab, elements=finite_or_not),
                     hnp.arrays(np.float64, vocab, elements=st.floats()))  # float64: beyond float32's range


@st.composite
def sampling_cases(draw: st.DrawFn, vocab: int) -> Sequence:
    token = st.integers(0, vocab - 1)
    params = SamplingParams(
        temperature=draw(at_bounds_or_between(0.0, 2.0)),
        top_p=draw(at_bounds_or_between(TINY, 1.0)),
        top_k=draw(st.one_of(st.sampled_from([0, 1, vocab - 1, vocab, vocab + 1, 2**62]), st.integers(0, vocab))),
        min_p=draw(at_bounds_or_between(0.0, 1.0)),
        repetition_penalty=draw(at_bounds_or_between(TINY, 100.0)),
        presence_penalty=draw(at_bounds_or_between(-2.0, 2.0)),
        frequency_penalty=draw(at_bounds_or_between(-2.0, 2.0)),
        logit_bias=draw(st.dictionaries(token, at_bounds_or_between(-100.0, 100.0), max_size=4)),
        seed=draw(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
    )
    seq = Sequence("r", draw(st.lists(token, min_size=1, max_size=8)), params)
    seq.output_ids = draw(st.lists(token, max_size=8))
    return seq


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, list[Sequence]]:
    vocab = draw(st.integers(1, 48))
    rows = draw(st.lists(logit_rows(vocab), min_size=1, max_size=4))
    dtype = np.float64 if any(r.dtype == np.float64 for r in rows) else np.float32
    return np.stack(rows).astype(dtype), [draw(sampling_cases(vocab)) for _ in rows]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_any_logits_and_any_parameters_give_a_valid_token(case: tuple[np.ndarray, list[Sequence]]) -> None:
    logits, seqs = case
    before = logits.copy()
    tokens = sample_next_tokens(logits, seqs)
    assert len(tokens) == len(seqs)
    assert all(isinstance(t, int) and 0 <= t < logits.shape[1] for t in tokens), tokens
    np.testing.assert_array_equal(logits, before)  # the runtime's buffer is never modified


@settings(max_examples=100, deadline=None)
@given(logit_rows(32), st.booleans())
def test_plain_greedy_batch_never_picks_nan_over_a_number(row: np.ndarray, greedy_only: bool) -> None:
    seq = Sequence("r", [0], SamplingParams(temperature=0.0 if greedy_only else 1.0, seed=0))
    token = sample_next_tokens(row[None, :], [seq])[0]
    usable = np.where(np.isnan(row), -np.inf, row.astype(np.float64))
    if np.isposinf(usable).any() or not np.isfinite(usable).any():
        assert token == int(np.argmax(usable))  # the documented fallback: first +inf, or token 0
    else:
        assert np.isfinite(usable[token]), (row, token)


def test_the_issue_requests_sample_greedily_instead_of_crashing() -> None:
    """temperature=5e-324 with min_p=0.1 overflowed to inf -> NaN probabilities -> no token (IndexError)."""
    row = np.random.default_rng(0).standard_normal(258).astype(np.float32) * 5
    tiny_temperature = Sequence("a", [65], SamplingParams(temperature=5e-324, min_p=0.1, seed=1))
    assert sample_next_tokens(row[None], [tiny_temperature]) == [int(np.argmax(row))]
    prompt = [int(np.argmax(row)), 7, 8]
    tiny_penalty = Sequence("b", prompt, SamplingParams(repetition_penalty=5e-324, min_p=0.05, seed=1))
    token = sample_next_tokens(row[None], [tiny_penalty])[0]
    assert 0 <= token < 258


def test_all_minus_inf_row_is_token_zero_and_nan_never_wins() -> None:
    dead = np.full((1, 10), -np.inf, dtype=np.float32)
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, top_p=0.5, min_p=0.5, seed=0)):
        assert sample_next_tokens(dead, [Sequence("r", [0], params)]) == [0]
    with_nan = np.array([[np.nan, 1.0, 3.0, np.nan]], dtype=np.float32)
    assert sample_next_tokens(with_nan, [Sequence("r", [0], SamplingParams(temperature=0.0))]) == [2]
