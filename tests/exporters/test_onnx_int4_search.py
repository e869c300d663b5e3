"""The weighted INT4 search: MatMulNBits reads its blocks as they were meant, it never loses to onnxruntime's
round-to-nearest on the error it minimises, and the columns that matter get the smaller errors."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.exporters.onnx.int4.search import Int4Blocks, search_int4_blocks


def _matmul_nbits(blocks: Int4Blocks, k: int, n: int, block: int, accuracy_level: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(blocks.packed, "B"), numpy_helper.from_array(blocks.scales, "S"),
             numpy_helper.from_array(blocks.zero_points, "Z")]
    node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _ort_rtn(weight: np.ndarray, block: int) -> Int4Blocks:
    """onnxruntime's asymmetric round-to-nearest of the same weight, read back as blocks."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    n, k = weight.shape
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(np.ascontiguousarray(weight.T), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=False, accuracy_level=4, bits=4)
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=block, is_symmetric=False, accuracy_level=4,
                                     algo_config=config)
    quantizer.process()
    stored = {i.name: numpy_helper.to_array(i) for i in quantizer.model.model.graph.initializer}
    return Int4Blocks(stored["W_Q4"], stored["W_scales"].reshape(n, -1), stored["W_zero_points"].reshape(n, -1))


@pytest.mark.parametrize(("k", "block"), [(96, 32), (80, 32), (192, 64)])  # 80: K padded up to whole blocks
def test_onnxruntime_computes_with_the_blocks_as_they_dequantize(k: int, block: int):
    rng = np.random.default_rng(k)
    n = 24
    weight = rng.normal(size=(n, k)).astype(np.float32)
    blocks = search_int4_blocks(weight, rng.uniform(0.1, 10, size=k), block)
    dequantized = blocks.dequantized()[:, :k]
    x = rng.normal(size=(5, k)).astype(np.float32)
    y = _matmul_nbits(blocks, k, n, block, accuracy_level=0).run(None, {"A": x})[0]  # fp32 compute: exact
    np.testing.assert_allclose(y, x @ dequantized.T, rtol=1e-4, atol=1e-4)
    # the blocks stand for the weight: a quarter of a step off on average, as rounding is; a few steps at most
    # where the search clipped an extreme of a block whose columns matter little
    step = np.repeat(blocks.scales, block, axis=1)[:, :k]
    error = np.abs(dequantized - weight) / step
    assert error.max() <= 3 and np.mean(error) < 0.3


def test_our_reader_reads_onnxruntimes_own_blocks():
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(16, 64)).astype(np.float32)
    rtn = _ort_rtn(weight, 32)
    step = np.repeat(rtn.scales, 32, axis=1)
    assert np.abs(rtn.dequantized() - weight).max() <= 0.5 * step.max() + 1e-5


def test_the_search_never_loses_to_round_to_nearest_on_the_weighted_error():
    rng = np.random.default_rng(2)
    n, k = 64, 128
    weight = (rng.standard_t(3, size=(n, k)) * 0.02).astype(np.float32)  # heavy tails, like trained weights
    importance = rng.lognormal(0, 2, size=k).astype(np.float32)  # a few columns matter far more
    searched = search_int4_blocks(weight, importance).dequantized()
    rtn = _ort_rtn(weight, 32).dequantized()
    blocks = weight.reshape(n, -1, 32)
    # the weighting the search minimises (llama.cpp's with an importance matrix): column importance times
    # sqrt(the block's mean square + the weight's square)
    weighting = importance.reshape(1, -1, 32) * np.sqrt((blocks ** 2).mean(-1, keepdims=True) + blocks ** 2)
    per_block = lambda w: (weighting * (w.reshape(n, -1, 32) - blocks) ** 2).sum(-1)  # noqa: E731
    assert (per_block(searched) <= per_block(rtn) * (1 + 1e-4) + 1e-12).all()
    assert per_block(searched).sum() < 0.8 * per_block(rtn).sum()


def test_the_columns_that_matter_get_the_smaller_errors():
    rng = np.random.default_rng(3)
    weight = rng.normal(size=(256, 32)).astype(np.float32)
    importance = np.ones(32, dtype=np.float32)
    importance[:4] = 1000.0  # four outlier activation channels
    weighted = search_int4_blocks(weight, importance).dequantized()
    plain = search_int4_blocks(weight, None).dequantized()
    loud = lambda w: np.mean((w - weight)[:, :4] ** 2)  # noqa: E731
    assert loud(weighted) < 0.7 * loud(plain)  # measured 0.57x
