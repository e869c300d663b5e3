"""Store a tied output projection once: the lm_head MatMul reads the token embedding through a Transpose.

optimum removes the duplicate only when the embedding module is a plain ``nn.Embedding``; Gemma 3's
scaled embedding (``Gemma3TextScaledWordEmbedding``) is not, so its export carries the vocabulary
matrix twice (for Gemma 3 1B, 1.2 GB of fp32 more on disk and in memory). After export we look for a
MatMul weight that equals the transposed Gather table and read the table instead, as optimum does for
the models it recognises. The comparison is exact, so an untied head is never touched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf caps a single file at 2 GB


def share_tied_embedding(onnx_path: Path) -> bool:
    """Rewrite ``onnx_path`` in place if its lm_head duplicates the embedding; whether it did.

    A graph past 2 GB comes from torch's exporter with one external file per initializer (hundreds of files
    beside model.onnx, which only ``model.onnx*`` copies would lose); it is rewritten with all of them in
    ``model.onnx_data`` whether or not a duplicate was found."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    model = onnx.load(str(onnx_path), load_external_data=False)
    scattered = _external_files(model)
    load_external_data_for_model(model, str(onnx_path.parent))
    deduplicated = _read_table_for_tied_head(model)
    if not deduplicated and len(scattered) <= 1:
        return False
    external = sum(len(init.raw_data) for init in model.graph.initializer) > EXTERNAL_DATA_BYTES
    location = onnx_path.name + "_data"
    # Every initializer is in memory now: the files it came from can go before the graph is written again.
    for stale in scattered | {location}:
        (onnx_path.parent / stale).unlink(missing_ok=True)
    onnx.save(model, str(onnx_path), save_as_external_data=external, all_tensors_to_one_file=True,
              location=location if external else None)
    return deduplicated


def _read_table_for_tied_head(model) -> bool:
    """Make the MatMul whose weight is the transposed embedding table read the table; whether there was one."""
    from onnx import helper, numpy_helper

    initializers = {init.name: init for init in model.graph.initializer}
    gathers = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] in initializers
               and len(initializers[n.input[0]].dims) == 2]
    if not gathers:
        return False
    table_name = max(gathers, key=lambda n: int(np.prod(initializers[n.input[0]].dims))).input[0]
    table = numpy_helper.to_array(initializers[table_name])
    duplicate = _duplicate_matmul_weight(model, initializers, table)
    if duplicate is None:
        return False
    transposed = f"{table_name}_transposed"
    for node in model.graph.node:
        node.input[:] = [transposed if name == duplicate else name for name in node.input]
    model.graph.initializer.remove(initializers[duplicate])
    model.graph.node.insert(0, helper.make_node("Transpose", [table_name], [transposed], perm=[1, 0],
                                                name="/lm_head/TiedTranspose"))
    return True


def _external_files(model) -> set[str]:
    """The files a graph's initializers keep their data in."""
    return {entry.value for init in model.graph.initializer for entry in init.external_data
            if entry.key == "location"}


def _duplicate_matmul_weight(model, initializers: dict, table: np.ndarray) -> str | None:
    from onnx import numpy_helper

    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in initializers:
            continue
        weight = initializers[node.input[1]]
        if tuple(weight.dims) == table.shape[::-1] and np.array_equal(numpy_helper.to_array(weight), table.T):
            return node.input[1]
    return None
