"""The token embedding of a quantized decoder in 8 or 4 bits, and with it a tied output layer.

MatMulNBits only quantizes MatMuls over stored weights, so the vocabulary table stayed fp32: on SmolLM2-135M
(49152 x 576, tied) 108 MiB of an INT4 file of 194, and its output layer, which reads the table through a
Transpose (exporters/onnx/tied_embedding.py), an fp32 MatMul re-reading 113 MB per decode step. Here the table
becomes blocks along its rows: the Gather becomes onnxruntime's GatherBlockQuantized, and a tied output layer a
MatMulNBits over the *same* blocks, stored once.

- 8 bits (the default of every INT4/INT8 path): uint8 blocks of 32 with one fp32 scale each (symmetric, stored
  + 128: the layout weight-only INT8 gives the MatMuls). MatMulNBits wants them as N x blocks x 32 and its scales
  two-dimensional, GatherBlockQuantized scales of the data's rank: a Reshape of the 2-D scales bridges the two.
- 4 bits (``--size`` chooses it when the bytes buy more elsewhere, exporters/onnx/int4/sized.py): the weighted
  search's blocks (levels packed two to a byte, fp32 scales, 4-bit zero points packed two to a byte), which
  GatherBlockQuantized reads in MatMulNBits' own layout when the data is viewed as rows x width/2: one Reshape
  of the data, and scales and zero points shared as they are.

llama.cpp keeps token_embd at Q6_K/Q8_0 in its 4-bit mixes for the reason 8 bits is the default here: a row is
read per token, its rounding is not averaged over a dot product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.exporters.onnx.int4.search import Int4Blocks
from edgeopt.exporters.onnx.nbits_blocks import Int8Blocks, eight_bit_blocks

BLOCK = 32


@dataclass(frozen=True)
class Table:
    """The largest float table Gather of a graph, and the tied output layer that reads it, if any."""

    gather: Any  # the Gather node
    name: str  # its table initializer
    vocab: int
    width: int
    head: tuple[Any, Any] | None  # (Transpose, MatMul) of a tied output layer


def find_table(model: Any, kept_in_float: list[str]) -> Table | None:
    """The table to quantize, unless it or its tied head is among ``kept_in_float`` (--keep-fp) or something else
    reads it."""
    stored = {init.name: init for init in model.graph.initializer}
    gathers = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] in stored
               and len(stored[n.input[0]].dims) == 2 and stored[n.input[0]].data_type == 1]  # FLOAT
    if not gathers:
        return None
    gather = max(gathers, key=lambda n: int(np.prod(stored[n.input[0]].dims)))
    name = gather.input[0]
    vocab, width = (int(d) for d in stored[name].dims)
    readers = [n for n in model.graph.node if name in n.input and n is not gather]
    head = tied_head(model, readers)
    if gather.name in kept_in_float or (readers and head is None) \
            or (head is not None and any(n.name in kept_in_float for n in head)):
        return None
    return Table(gather, name, vocab, width, head)


def table_weight(model: Any, table: Table) -> np.ndarray:
    from onnx import numpy_helper

    stored = next(init for init in model.graph.initializer if init.name == table.name)
    return numpy_helper.to_array(stored).astype(np.float32)


def quantize_embedding(model: Any, kept_in_float: list[str], accuracy_level: int) -> dict[str, Any] | None:
    """Quantize the largest fp32 table Gather of ``model`` in place to 8 bits in blocks of 32 (and the tied output
    layer that reads it). The facts for the manifest, or None when nothing changed."""
    table = find_table(model, kept_in_float)
    if table is None or table.width % BLOCK:
        return None
    return write_table(model, table, eight_bit_blocks(table_weight(model, table), BLOCK), accuracy_level)


def write_table(model: Any, table: Table, blocks: Int8Blocks | Int4Blocks, accuracy_level: int) -> dict[str, Any]:
    """Replace ``table``'s Gather (and tied head) by ``blocks``; the facts for the manifest."""
    from onnx import helper

    gather, name = table.gather, table.name
    model.graph.initializer.remove(next(init for init in model.graph.initializer if init.name == name))
    if isinstance(blocks, Int8Blocks):
        inputs, nodes, bits, block = _eight_bit_gather(model, table, blocks)
    else:
        inputs, nodes, bits, block = _four_bit_gather(model, table, blocks)
    _replace(model, [gather], nodes)
    facts: dict[str, Any] = {"node": gather.name, "bits": bits, "block_size": block, "rows": table.vocab,
                             "width": table.width}
    if table.head is not None:
        transpose, matmul = table.head
        _replace(model, [transpose, matmul], [helper.make_node(
            "MatMulNBits", [matmul.input[0], *inputs], list(matmul.output), name=f"{matmul.name}_Q{bits}",
            domain="com.microsoft", K=table.width, N=table.vocab, bits=bits, block_size=block,
            accuracy_level=accuracy_level)])
        facts["tied_output"] = matmul.name
    return facts


def _eight_bit_gather(model: Any, table: Table, blocks: Int8Blocks) -> tuple[list[str], list[Any], int, int]:
    from onnx import helper, numpy_helper

    gather, name = table.gather, table.name
    vocab, n_blocks, block = blocks.data.shape
    data_name, scales_name = f"{name}_Q8", f"{name}_scales"
    model.graph.initializer.extend([
        numpy_helper.from_array(blocks.data, data_name), numpy_helper.from_array(blocks.scales, scales_name),
        numpy_helper.from_array(np.array([vocab, n_blocks, 1], dtype=np.int64), f"{name}_scales_shape"),
        numpy_helper.from_array(np.array([table.width], dtype=np.int64), f"{name}_width")])
    nodes = [
        helper.make_node("Reshape", [scales_name, f"{name}_scales_shape"], [f"{scales_name}_3d"], name=f"{gather.name}_scales"),
        helper.make_node("GatherBlockQuantized", [data_name, gather.input[1], f"{scales_name}_3d"], [f"{gather.output[0]}_blocks"],
                         name=f"{gather.name}_Q8", domain="com.microsoft", gather_axis=0, quantize_axis=2,
                         block_size=block, bits=8),
        # (..., blocks, block) -> (..., width): the ids' own shape followed by the width
        helper.make_node("Shape", [gather.input[1]], [f"{gather.name}_ids_shape"], name=f"{gather.name}_ids_shape"),
        helper.make_node("Concat", [f"{gather.name}_ids_shape", f"{name}_width"], [f"{gather.name}_out_shape"],
                         name=f"{gather.name}_out_shape", axis=0),
        helper.make_node("Reshape", [f"{gather.output[0]}_blocks", f"{gather.name}_out_shape"], list(gather.output),
                         name=f"{gather.name}_rows"),
    ]
    return [data_name, scales_name], nodes, 8, block


def _four_bit_gather(model: Any, table: Table, blocks: Int4Blocks) -> tuple[list[str], list[Any], int, int]:
    from onnx import helper, numpy_helper

    gather, name = table.gather, table.name
    vocab, n_blocks, half = blocks.packed.shape
    data_name, scales_name, zeros_name = f"{name}_Q4", f"{name}_scales", f"{name}_zero_points"
    model.graph.initializer.extend([
        numpy_helper.from_array(blocks.packed, data_name), numpy_helper.from_array(blocks.scales, scales_name),
        numpy_helper.from_array(blocks.zero_points, zeros_name),
        numpy_helper.from_array(np.array([vocab, n_blocks * half], dtype=np.int64), f"{name}_rows_shape")])
    nodes = [
        helper.make_node("Reshape", [data_name, f"{name}_rows_shape"], [f"{data_name}_rows"], name=f"{gather.name}_rows"),
        helper.make_node("GatherBlockQuantized", [f"{data_name}_rows", gather.input[1], scales_name, zeros_name],
                         list(gather.output), name=f"{gather.name}_Q4", domain="com.microsoft", gather_axis=0,
                         quantize_axis=1, block_size=half * 2, bits=4),
    ]
    return [data_name, scales_name, zeros_name], nodes, 4, half * 2


def tied_head(model: Any, readers: list[Any]) -> tuple[Any, Any] | None:
    """(Transpose, MatMul) when the table's only other reader is a Transpose feeding only one MatMul's weight."""
    if len(readers) != 1 or readers[0].op_type != "Transpose":
        return None
    transpose = readers[0]
    users = [n for n in model.graph.node if transpose.output[0] in n.input]
    if len(users) != 1 or users[0].op_type != "MatMul" or users[0].input[1] != transpose.output[0]:
        return None
    return transpose, users[0]


def _replace(model: Any, old: list[Any], new: list[Any]) -> None:
    """Put ``new`` where the last of ``old`` stood, after everything its inputs come from (the graph stays
    topologically sorted)."""
    nodes = list(model.graph.node)
    at = max(nodes.index(n) for n in old) - (len(old) - 1)
    for n in old:
        model.graph.node.remove(n)
    for offset, n in enumerate(new):
        model.graph.node.insert(at + offset, n)
