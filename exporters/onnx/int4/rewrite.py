"""Put the weighted search's 4-bit blocks (exporters/onnx/int4/search.py) into the MatMulNBits nodes onnxruntime's
quantizer made with asymmetric round-to-nearest: same node, same tensor names and shapes, better levels, scales
and zero points. The quantizer keeps doing what it does well (graph surgery, shapes, the reshape chains it adds
for N-D weights); only the numbers change.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.int4.search import search_int4_blocks


def float_weights(model: Any, skip: set[str]) -> dict[str, np.ndarray]:
    """Every stored MatMul weight (K x N) of ``model`` whose node is not in ``skip``, copied out before the
    quantizer replaces them (the quantized graph no longer holds the float weights)."""
    from onnx import numpy_helper

    stored = {init.name: init for init in model.graph.initializer}
    return {node.input[1]: numpy_helper.to_array(stored[node.input[1]]).astype(np.float32)
            for node in model.graph.node
            if node.op_type == "MatMul" and node.name not in skip and node.input[1] in stored}


def module_of(node_name: str) -> str:
    """The HF module an optimum node belongs to: ``/model/layers.0/mlp/up_proj/MatMul_Q4`` ->
    ``model.layers.0.mlp.up_proj`` (optimum names nodes after modules, fusion keeps MatMul names)."""
    parts = node_name.strip("/").split("/")
    return ".".join(parts[:-1]) if len(parts) > 1 else node_name


def weigh_int4_blocks(model: Any, weights: dict[str, np.ndarray], energy: InputEnergy | None,
                      block_size: int) -> dict[str, Any]:
    """Replace the levels, scales and zero points of every 4-bit MatMulNBits node of ``model`` (in place)."""
    from onnx import numpy_helper

    stored = {init.name: init for init in model.graph.initializer}
    weighed = unweighted = 0
    for node in model.graph.node:
        attrs = {a.name: a.i for a in node.attribute if a.type == a.INT}
        if node.op_type != "MatMulNBits" or attrs.get("bits") != 4:
            continue
        if len(node.input) < 4:
            raise ExportError(f"{node.name} has no zero points", "the weighted search needs asymmetric blocks")
        source = node.input[1].removesuffix("_Q4")
        if source not in weights:
            raise ExportError(f"no float weight {source!r} for {node.name}", "report this model to edgeopt")
        importance = energy.mean(module_of(node.name)) if energy else None
        weighed, unweighted = weighed + (importance is not None), unweighted + (importance is None)
        blocks = search_int4_blocks(weights[source].T, importance, block_size)
        for name, array in zip(node.input[1:4], (blocks.packed, blocks.scales, blocks.zero_points)):
            old = numpy_helper.to_array(stored[name])
            stored[name].CopyFrom(numpy_helper.from_array(array.reshape(old.shape).astype(old.dtype), name))
    if energy is not None and not weighed:
        raise ExportError("no INT4 MatMul matched a module the calibration text was measured on",
                          "report this model to edgeopt; --no-self-calibration quantizes without the statistics")
    return {"weighted_nodes": weighed, "nodes_without_statistics": unweighted}
