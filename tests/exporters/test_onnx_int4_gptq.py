"""GPTQ rounding of 4-bit blocks: on correlated inputs it changes a layer's output less than rounding each weight
to its nearest level, its blocks are MatMulNBits' own layout (onnxruntime computes with them as they dequantize),
and the input statistics it needs are collected once per distinct input."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.exporters.onnx.int4.gptq import gptq_int4_blocks, output_error
from edgeopt.exporters.onnx.int4.search import search_int4_blocks
from tests.exporters.test_onnx_int4_search import _matmul_nbits


class _CorrelatedInputs:
    """Inputs mixed from fewer sources than columns, with a few loud columns: a trained layer's inputs are so."""

    def __init__(self, rng: np.random.Generator, k: int) -> None:
        self.rng, self.mixing, self.loudness = rng, rng.normal(size=(k // 4, k)), rng.lognormal(0, 1, size=k)

    def sample(self, tokens: int) -> np.ndarray:
        k = self.mixing.shape[1]
        mixed = self.rng.normal(size=(tokens, k // 4)) @ self.mixing + 0.1 * self.rng.normal(size=(tokens, k))
        return (mixed * self.loudness).astype(np.float32)


def _correlated_inputs(rng: np.random.Generator, tokens: int, k: int) -> np.ndarray:
    return _CorrelatedInputs(rng, k).sample(tokens)


@pytest.mark.parametrize(("k", "block"), [(128, 32), (96, 32), (80, 32), (192, 64)])  # 80: padded to whole blocks
def test_gptq_changes_the_output_less_than_rounding_each_weight(k: int, block: int):
    rng = np.random.default_rng(k + block)
    n = 48
    weight = (rng.standard_t(4, size=(n, k)) * 0.02).astype(np.float32)
    source = _CorrelatedInputs(rng, k)
    x = source.sample(2048)
    gram = x.T @ x / len(x)
    nearest = search_int4_blocks(weight, np.diag(gram), block).dequantized()
    compensated = gptq_int4_blocks(weight, gram, block).dequantized()
    fresh = source.sample(2048)  # inputs it never saw, from the same source
    fresh_gram = fresh.T @ fresh / len(fresh)
    assert output_error(weight, compensated, gram) < 0.7 * output_error(weight, nearest, gram)
    assert output_error(weight, compensated, fresh_gram) < 0.8 * output_error(weight, nearest, fresh_gram)


@pytest.mark.parametrize(("k", "block"), [(96, 32), (80, 32), (192, 64)])
def test_onnxruntime_computes_with_gptq_blocks_as_they_dequantize(k: int, block: int):
    rng = np.random.default_rng(k)
    n = 24
    weight = rng.normal(size=(n, k)).astype(np.float32)
    x = _correlated_inputs(rng, 512, k)
    blocks = gptq_int4_blocks(weight, x.T @ x / len(x), block)
    assert blocks.packed.shape == (n, -(-k // block), block // 2) and blocks.zero_points.max() <= 0xFF
    dequantized = blocks.dequantized()[:, :k]
    y = _matmul_nbits(blocks, k, n, block, accuracy_level=0).run(None, {"A": x[:5]})[0]  # fp32 compute: exact
    np.testing.assert_allclose(y, x[:5] @ dequantized.T, rtol=1e-4, atol=1e-3)
    # int8 compute (what --size writes): the same product within the activations' own 8-bit rounding
    y8 = _matmul_nbits(blocks, k, n, block, accuracy_level=4).run(None, {"A": x[:5]})[0]
    assert np.abs(y8 - y).max() < 0.02 * np.abs(y).max()


def test_an_input_column_never_seen_does_not_break_the_factorization():
    rng = np.random.default_rng(3)
    weight = rng.normal(size=(16, 64)).astype(np.float32)
    x = _correlated_inputs(rng, 256, 64)
    x[:, 5] = 0.0  # a column always zero on the calibration text: its row and column of H are zero
    blocks = gptq_int4_blocks(weight, x.T @ x / len(x), 32)
    assert np.isfinite(blocks.scales).all()
    assert np.abs(blocks.dequantized() - weight).max() < 4 * np.repeat(blocks.scales, 32, axis=1).max()


def test_modules_reading_one_input_share_one_gram_sum():
    import torch

    from edgeopt.exporters.input_energy import _GramSums

    sums = _GramSums()
    generator = torch.Generator().manual_seed(0)
    first, second = torch.randn(1, 6, 8, generator=generator), torch.randn(1, 6, 8, generator=generator)
    for _chunk in range(2):
        sums.add("q", first)
        sums.add("k", first)  # the same tensor: shared, not summed again
        sums.add("o", second)
    grams = sums.arrays()
    x, y = first.reshape(-1, 8).double(), second.reshape(-1, 8).double()
    # float32 sums against a float64 reference: an entry near zero needs an absolute tolerance too
    np.testing.assert_allclose(grams["q"], (2 * x.T @ x).numpy(), rtol=1e-5, atol=1e-5)
    assert grams["k"] is grams["q"]
    np.testing.assert_allclose(grams["o"], (2 * y.T @ y).numpy(), rtol=1e-5, atol=1e-5)
