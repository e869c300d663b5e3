"""The weights ``--size`` chooses a width for (exporters/onnx/int4/sized.py): each MatMul's, and the token table's
(with its tied output layer), with the torch modules they come from and the group (a role in a band of layers)
whose sensitivity is measured for them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeopt.exporters.onnx.embedding_quant import Table, table_weight
from edgeopt.exporters.onnx.int4.rewrite import module_of

BANDS = 3  # layer bands per role whose sensitivity is measured, as the GGUF mix
_LAYER = re.compile(r"^(.*?layers)\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Weight:
    """One choice of the mix: a MatMul's weight, or the token table (with its tied output layer)."""

    name: str  # the MatMul's node name, or the table Gather's
    modules: tuple[str, ...]  # the torch modules whose weight it is (model.layers.3.mlp.down_proj)
    energy_module: str  # whose input statistics weigh its blocks (a tied table: the output layer's)
    weight: np.ndarray  # N x K float32 (torch's layout)
    group: str
    table: bool = False  # a Gather's table: its blocks must divide its rows (GatherBlockQuantized does not pad)


def group_of(module: str, n_layers: int, bands: int = BANDS) -> str:
    found = _LAYER.match(module)
    if found is None:
        return module
    layer, size = int(found.group(2)), -(-n_layers // bands)
    first = layer // size * size
    return f"{found.group(3)}@{first}-{min(first + size, n_layers) - 1}"


def output_layers(weights: list[Weight]) -> set[str]:
    """The weights whose norm ``--size`` smooths: the output layer's (a tied table, or an lm_head outside the layers).
    Its 8 bits take the column scales in their stride; q/k/v and gate/up, mostly 4-bit, measured worse for them
    (held-out KL 0.0317 against 0.0303 with the output layer's alone, SmolLM2-135M at GGUF Q4_K_M's size)."""
    return {w.name for w in weights if w.table or _LAYER.match(w.energy_module) is None}


def find_weights(model: Any, nodes: list[str], table: Table | None, n_layers: int) -> list[Weight]:
    """The MatMuls ``nodes`` of the float ``model`` and its token table, as choices."""
    from onnx import numpy_helper

    stored = {init.name: init for init in model.graph.initializer}
    wanted = set(nodes)
    found = []
    for node in model.graph.node:
        if node.name in wanted:
            module = module_of(node.name)
            found.append(Weight(node.name, (module,), module, numpy_helper.to_array(stored[node.input[1]]).T
                                .astype(np.float32), group_of(module, n_layers)))
    if table is not None:
        module = module_of(table.gather.name)
        head = module_of(table.head[1].name) if table.head else None
        found.append(Weight(table.gather.name, (module, head) if head else (module,), head or module,
                            table_weight(model, table), module, table=True))
    return found
