"""The sampler reads llguidance's packed masks without unpacking the batch: a greedy row's raw argmax is
checked with one bit test, and only a forbidden pick falls back to the masked argmax. That fast path must
pick exactly the token the full masked argmax picks (random logits incl. NaN/inf and ties, masks that
forbid the top token, masks that allow a single token)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgeopt.engine.api import SamplingParams
from edgeopt.engine.sampler import sample_next_tokens, sample_row
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.token_bitmask import allowed_tokens, tokens_allowed


def pack(allowed: np.ndarray) -> np.ndarray:
    """Bool rows -> int32 words as llguidance fills them (bit i of word w is token 32*w + i; unused tail bits set)."""
    words = -(-allowed.shape[-1] // 32)
    padded = np.ones((allowed.shape[0], words * 32), dtype=bool)
    padded[:, :allowed.shape[-1]] = allowed
    return np.packbits(padded, axis=-1, bitorder="little").view(np.int32)


def masked_argmax(logits: np.ndarray, allowed: np.ndarray) -> list[int]:
    """The reference: every forbidden token and NaN set to -inf, then the first best token of each row."""
    masked = np.where(allowed & ~np.isnan(logits), logits, -np.inf)
    return np.argmax(masked, axis=1).tolist()


@st.composite
def masked_batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    rows, vocab = draw(st.integers(1, 6)), draw(st.integers(1, 97))
    # Few distinct values: ties between the best tokens are common.
    values = st.one_of(st.sampled_from([0.0, 1.0, 2.0, np.inf, -np.inf, np.nan]), st.floats(-3, 3, width=32))
    logits = draw(hnp.arrays(np.float32, (rows, vocab), elements=values))
    allowed = draw(hnp.arrays(np.bool_, (rows, vocab)))
    for r in range(rows):
        kind = draw(st.sampled_from(["random", "forbid_top", "single", "all"]))
        if kind == "forbid_top":  # the raw pick is forbidden: the fallback must run
            allowed[r, np.argmax(np.where(np.isnan(logits[r]), -np.inf, logits[r]))] = False
        elif kind == "single":
            allowed[r] = False
            allowed[r, draw(st.integers(0, vocab - 1))] = True
        elif kind == "all":
            allowed[r] = True
    return logits, allowed


def greedy_seqs(n: int) -> list[Sequence]:
    return [Sequence(f"r{i}", [0], SamplingParams(temperature=0.0)) for i in range(n)]


@settings(max_examples=400, deadline=None)
@given(masked_batches())
def test_greedy_fast_path_picks_the_masked_argmax(batch: tuple[np.ndarray, np.ndarray]) -> None:
    logits, allowed = batch
    assert sample_next_tokens(logits, greedy_seqs(len(logits)), pack(allowed)) == masked_argmax(logits, allowed)


def test_fast_path_on_a_151k_vocabulary_with_forbidden_and_single_token_rows() -> None:
    rng = np.random.default_rng(0)
    vocab = 151_646
    logits = rng.standard_normal((16, vocab)).astype(np.float32)
    allowed = rng.random((16, vocab)) < 0.9
    top = logits.argmax(axis=1)
    allowed[:4, top[:4]] = False  # rows 0-3: the raw pick is forbidden
    allowed[4] = False
    allowed[4, vocab - 1] = True  # row 4: only the last token (a tail word's bit)
    allowed[5] = False
    allowed[5, 31] = True  # row 5: only token 31, the sign bit of an int32 word
    logits[6, [7, 9000]] = 50.0  # row 6: a tie at the top, the first forbidden
    allowed[6, 7] = False
    assert sample_next_tokens(logits, greedy_seqs(16), pack(allowed)) == masked_argmax(logits, allowed)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.integers(0, 2**32 - 1))
def test_bit_tests_and_unpacking_agree_with_the_bool_mask(vocab: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    allowed = rng.random((3, vocab)) < 0.5
    packed = pack(allowed)
    assert np.array_equal(allowed_tokens(packed, vocab), allowed)
    for token in range(vocab):
        expected = allowed[:, token]
        assert np.array_equal(tokens_allowed(packed, np.full(3, token)), expected), token


def test_sampled_constrained_row_draws_as_with_the_unpacked_mask() -> None:
    rng = np.random.default_rng(1)
    vocab = 1000
    logits = rng.standard_normal((2, vocab)).astype(np.float32)
    allowed = rng.random((2, vocab)) < 0.05
    params = SamplingParams(temperature=1.0, seed=7)
    seqs = [Sequence("a", [0], params), Sequence("b", [0], params)]
    seqs[0].constraint = object()  # constrained (the sampler only asks whether there is one); row 1 is free
    reference = [Sequence("a", [0], params), Sequence("b", [0], params)]
    for _ in range(20):
        tokens = sample_next_tokens(logits, seqs, pack(allowed))
        assert allowed[0, tokens[0]]
        assert tokens == [sample_row(logits[0], reference[0], allowed[0]), sample_row(logits[1], reference[1])]
