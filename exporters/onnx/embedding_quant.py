"""The token embedding of a quantized decoder in 8 bits, and with it a tied output layer.

MatMulNBits only quantizes MatMuls over stored weights, so the vocabulary table stayed fp32: on SmolLM2-135M
(49152 x 576, tied) 108 MiB of an INT4 file of 194, and its output layer, which reads the table through a
Transpose (exporters/onnx/tied_embedding.py), an fp32 MatMul re-reading 113 MB per decode step. Here the table
becomes uint8 blocks of 32 with one fp32 scale each (symmetric, stored + 128: the layout weight-only INT8 gives
the MatMuls): the Gather becomes onnxruntime's GatherBlockQuantized, and a tied output layer a MatMulNBits over
the *same* blocks (MatMulNBits wants them as N x blocks x 32 and its scales two-dimensional, GatherBlockQuantized
wants scales of the data's rank: a Reshape of the 2-D scales, a few MB, bridges the two). llama.cpp keeps
token_embd at Q6_K/Q8_0 in its 4-bit mixes for the same reason it is not 4 bits here: a row is read per token,
its rounding is not averaged over a dot product.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BLOCK = 32
LEVELS = 127  # symmetric -127..127, stored as uint8 + 128: the zero point both operators assume for 8 bits


def quantize_embedding(model: Any, kept_in_float: list[str], accuracy_level: int) -> dict[str, Any] | None:
    """Quantize the largest fp32 table Gather of ``model`` in place (and the tied output layer that reads the table
    through a Transpose), unless one of them is among ``kept_in_float`` (--keep-fp) or something else reads the
    table. The facts for the manifest, or None when nothing changed."""
    from onnx import helper, numpy_helper

    stored = {init.name: init for init in model.graph.initializer}
    gathers = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] in stored
               and len(stored[n.input[0]].dims) == 2 and stored[n.input[0]].data_type == 1]  # FLOAT
    if not gathers:
        return None
    gather = max(gathers, key=lambda n: int(np.prod(stored[n.input[0]].dims)))
    name = gather.input[0]
    vocab, width = (int(d) for d in stored[name].dims)
    readers = [n for n in model.graph.node if name in n.input and n is not gather]
    head = _tied_head(model, readers)
    if width % BLOCK or gather.name in kept_in_float or (readers and head is None) \
            or (head is not None and any(n.name in kept_in_float for n in head)):
        return None
    blocks = width // BLOCK
    table = numpy_helper.to_array(stored[name]).reshape(vocab, blocks, BLOCK)
    scales = (np.abs(table).max(-1) / LEVELS).astype(np.float32)
    data = (np.clip(np.round(table / np.where(scales == 0, 1.0, scales)[..., None]), -LEVELS, LEVELS) + 128).astype(np.uint8)
    data_name, scales_name = f"{name}_Q8", f"{name}_scales"
    model.graph.initializer.remove(stored[name])
    model.graph.initializer.extend([
        numpy_helper.from_array(data, data_name), numpy_helper.from_array(scales, scales_name),
        numpy_helper.from_array(np.array([vocab, blocks, 1], dtype=np.int64), f"{name}_scales_shape"),
        numpy_helper.from_array(np.array([width], dtype=np.int64), f"{name}_width")])
    nodes = [
        helper.make_node("Reshape", [scales_name, f"{name}_scales_shape"], [f"{scales_name}_3d"], name=f"{gather.name}_scales"),
        helper.make_node("GatherBlockQuantized", [data_name, gather.input[1], f"{scales_name}_3d"], [f"{gather.output[0]}_blocks"],
                         name=f"{gather.name}_Q8", domain="com.microsoft", gather_axis=0, quantize_axis=2,
                         block_size=BLOCK, bits=8),
        # (..., blocks, 32) -> (..., width): the ids' own shape followed by the width
        helper.make_node("Shape", [gather.input[1]], [f"{gather.name}_ids_shape"], name=f"{gather.name}_ids_shape"),
        helper.make_node("Concat", [f"{gather.name}_ids_shape", f"{name}_width"], [f"{gather.name}_out_shape"],
                         name=f"{gather.name}_out_shape", axis=0),
        helper.make_node("Reshape", [f"{gather.output[0]}_blocks", f"{gather.name}_out_shape"], list(gather.output),
                         name=f"{gather.name}_rows"),
    ]
    _replace(model, [gather], nodes)
    facts: dict[str, Any] = {"node": gather.name, "bits": 8, "block_size": BLOCK, "rows": vocab, "width": width}
    if head is not None:
        transpose, matmul = head
        _replace(model, [transpose, matmul], [helper.make_node(
            "MatMulNBits", [matmul.input[0], data_name, scales_name], list(matmul.output), name=f"{matmul.name}_Q8",
            domain="com.microsoft", K=width, N=vocab, bits=8, block_size=BLOCK, accuracy_level=accuracy_level)])
        facts["tied_output"] = matmul.name
    return facts


def _tied_head(model: Any, readers: list[Any]) -> tuple[Any, Any] | None:
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
