"""Weight-only 8-bit blocks, and MatMulNBits nodes written straight from blocks already computed.

``--size`` (exporters/onnx/int4/sized.py) measures every MatMul's 4-bit and 8-bit blocks before choosing; writing
those same blocks into the graph, instead of running onnxruntime's quantizer and searching the 4-bit blocks a
second time, is what makes the file exactly what was measured (and halves the work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.exporters.onnx.int4.search import Int4Blocks

LEVELS_8 = 127  # symmetric -127..127, stored as uint8 + 128: the zero point MatMulNBits assumes for 8 bits


@dataclass(frozen=True)
class Int8Blocks:
    """MatMulNBits' 8-bit initializers for N output rows and K inputs in blocks (no zero points: symmetric)."""

    data: np.ndarray  # uint8 (N, K/block, block): level + 128
    scales: np.ndarray  # float32 (N, K/block)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scales.nbytes

    def dequantized(self) -> np.ndarray:
        n = self.data.shape[0]
        return ((self.data.astype(np.float32) - 128) * self.scales[..., None]).reshape(n, -1)


def eight_bit_blocks(weight: np.ndarray, block: int) -> Int8Blocks:
    """The N x K weight in symmetric round-to-nearest blocks of ``block`` along K (K padded with zeros)."""
    n, k = weight.shape
    padded = np.zeros((n, -(-k // block) * block), dtype=np.float32)
    padded[:, :k] = weight
    blocks = padded.reshape(n, -1, block)
    scales = (np.abs(blocks).max(-1) / LEVELS_8).astype(np.float32)
    levels = np.clip(np.round(blocks / np.where(scales == 0, 1.0, scales)[..., None]), -LEVELS_8, LEVELS_8)
    return Int8Blocks((levels + 128).astype(np.uint8), scales)


def four_bit_nbytes(blocks: Int4Blocks) -> int:
    return blocks.packed.nbytes + blocks.scales.nbytes + blocks.zero_points.nbytes


def write_matmul_nbits(model: Any, node: Any, blocks: Int4Blocks | Int8Blocks, k_in: int,
                       accuracy_level: int) -> None:
    """Replace the MatMul ``node`` (its weight a stored K x N initializer) of ``model`` by a MatMulNBits over
    ``blocks``, in place; the float weight goes when nothing else reads it."""
    from onnx import helper, numpy_helper

    weight_name = node.input[1]
    if isinstance(blocks, Int8Blocks):
        bits, arrays = 8, [blocks.data, blocks.scales]
        n_out, _, block = blocks.data.shape
    else:
        bits, arrays = 4, [blocks.packed, blocks.scales, blocks.zero_points]
        n_out, _, half = blocks.packed.shape
        block = half * 2
    names = [f"{weight_name}_Q{bits}", f"{weight_name}_scales", f"{weight_name}_zero_points"][:len(arrays)]
    model.graph.initializer.extend(numpy_helper.from_array(a, n) for a, n in zip(arrays, names))
    replacement = helper.make_node("MatMulNBits", [node.input[0], *names], list(node.output), name=f"{node.name}_Q{bits}",
                                   domain="com.microsoft", K=k_in, N=n_out, bits=bits, block_size=block,
                                   accuracy_level=accuracy_level)
    at = list(model.graph.node).index(node)
    model.graph.node.remove(node)
    model.graph.node.insert(at, replacement)
    if not any(weight_name in n.input for n in model.graph.node):
        model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == weight_name))


def ensure_microsoft_opset(model: Any) -> None:
    """MatMulNBits and GatherBlockQuantized live in onnxruntime's com.microsoft domain."""
    from onnx import helper

    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
