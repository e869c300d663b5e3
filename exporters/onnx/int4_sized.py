"""``--format onnx --quant int4 --size``: which MatMuls keep 8 bits, chosen by measured sensitivity to fit a size.

``--int4-mix sensitive-int8`` keeps fixed roles (v, o, down) in 8 bits whatever the model. Here, as the GGUF mix
does (exporters/gguf/mix.py), the model says where bits matter:

1. **Weighted error per MatMul, at 4 and at 8 bits**: the weight's 4-bit blocks as the weighted search writes them
   (exporters/onnx/int4_search.py) and its symmetric 8-bit blocks, each compared with the float weight, every
   column's squared error weighted by the calibration text's mean squared input of that column.
2. **Measured KL per group** (a role in a band of layers, ``mlp.down_proj@10-19``): the checkpoint in torch with
   that group's weights replaced by their 4-bit blocks, scored on calibration chunks against the unchanged
   checkpoint. The KL it adds over the error it added turns each MatMul's errors into predicted KL.
3. **The choice**: one width per MatMul, the lowest predicted KL within the budget (the GGUF mix's exact
   multiple-choice knapsack, exporters/gguf/mix_choose.py). A MatMul's bytes are MatMulNBits' own layout; the rest of
   the file (the 8-bit token table, norms, rotary tables, the graph) is the float source's bytes less its MatMul
   weights, plus the table's 8-bit blocks, and is corrected by the written file when that differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError
from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.int4_rewrite import float_weights, module_of
from edgeopt.exporters.onnx.int4_search import search_int4_blocks

EIGHT_BIT_BLOCK = 32  # weight-only INT8's layout (exporters/onnx/quantize.py)
BANDS = 3  # layer bands per role whose sensitivity is measured, as the GGUF mix
SENSITIVITY_CHUNKS = 2
SIZE_TOLERANCE = 0.01  # a file within 1% under the size asked, never over it
_LAYER = re.compile(r"^(.*?layers)\.(\d+)\.(.+)$")


def matmul_bytes(n_out: int, k_in: int, bits: int, block: int) -> int:
    """Bytes MatMulNBits stores for an N x K weight: 4 bits + an fp32 scale per block and 4-bit zero points
    (a row's packed two to a byte); 8 bits (symmetric, blocks of 32) + an fp32 scale per block."""
    if bits == 8:
        return n_out * -(-k_in // EIGHT_BIT_BLOCK) * (EIGHT_BIT_BLOCK + 4)
    blocks = -(-k_in // block)
    return n_out * blocks * (block // 2 + 4) + n_out * -(-blocks // 2)


@dataclass(frozen=True)
class Node:
    name: str  # the MatMul's node name
    module: str  # the HF module it computes (model.layers.3.mlp.down_proj)
    weight: np.ndarray  # N x K float32 (torch's layout)
    group: str


def group_of(module: str, n_layers: int, bands: int = BANDS) -> str:
    found = _LAYER.match(module)
    if found is None:
        return module
    layer, size = int(found.group(2)), -(-n_layers // bands)
    first = layer // size * size
    return f"{found.group(3)}@{first}-{min(first + size, n_layers) - 1}"


def weighted_error(weight: np.ndarray, approximation: np.ndarray, importance: np.ndarray | None) -> float:
    squared = np.square(weight - approximation[:, :weight.shape[1]], dtype=np.float64).sum(axis=0)
    return float(squared @ importance if importance is not None else squared.sum())


def eight_bit(weight: np.ndarray) -> np.ndarray:
    """The N x K weight as weight-only INT8 stores it (symmetric round to nearest, blocks of 32), de-quantized."""
    n, k = weight.shape
    padded = np.zeros((n, -(-k // EIGHT_BIT_BLOCK) * EIGHT_BIT_BLOCK), dtype=np.float32)
    padded[:, :k] = weight
    blocks = padded.reshape(n, -1, EIGHT_BIT_BLOCK)
    scale = np.abs(blocks).max(-1, keepdims=True) / 127
    safe = np.where(scale == 0, 1.0, scale)
    return (np.clip(np.round(blocks / safe), -127, 127) * scale).reshape(n, -1)


@dataclass(frozen=True)
class Costs:
    options: dict[str, list[Any]]  # node -> [Option int4, Option int8] (exporters/gguf/mix_choose.Option)
    group_kl: dict[str, float]  # group -> KL its 4-bit blocks add to the float checkpoint


def measure_costs(source: Path, nodes: list[str], model_dir: Path, energy: InputEnergy | None,
                  chunks: list[list[int]], block: int, threads: int = 2) -> Costs:
    """Every MatMul's bytes and predicted KL at 4 and at 8 bits."""
    import onnx

    from edgeopt.exporters.gguf.mix_choose import Option
    from edgeopt.model_spec import load_model_spec

    n_layers = load_model_spec(str(model_dir)).num_layers
    model = onnx.load(str(source))
    by_node = {n.name: n.input[1] for n in model.graph.node if n.name in set(nodes)}
    weights = float_weights(model, set())
    found = [Node(name, module_of(name), weights[by_node[name]].T, group_of(module_of(name), n_layers))
             for name in nodes]
    errors: dict[str, tuple[float, float]] = {}
    four_bit: dict[str, np.ndarray] = {}
    for node in found:
        importance = energy.mean(node.module) if energy else None
        four_bit[node.name] = search_int4_blocks(node.weight, importance, block).dequantized()[:, :node.weight.shape[1]]
        errors[node.name] = (weighted_error(node.weight, four_bit[node.name], importance),
                             weighted_error(node.weight, eight_bit(node.weight), importance))
    group_kl = measure_group_kl(model_dir, found, four_bit, chunks[:SENSITIVITY_CHUNKS], threads)
    scales = {}
    for group, kl in group_kl.items():
        added = sum(errors[n.name][0] - errors[n.name][1] for n in found if n.group == group)
        scales[group] = kl / added if added > 0 else 0.0
    options = {}
    for node in found:
        n_out, k_in = node.weight.shape
        four, eight = errors[node.name]
        options[node.name] = [Option("int4", matmul_bytes(n_out, k_in, 4, block), scales[node.group] * four),
                              Option("int8", matmul_bytes(n_out, k_in, 8, block), scales[node.group] * eight)]
    return Costs(options, group_kl)


def _refuse(budget_bytes: int, smallest: int) -> None:
    if smallest > budget_bytes:
        raise ConfigError(f"--size {budget_bytes / 2**20:.2f}MiB is below this model's smallest INT4 ONNX file, "
                          f"about {smallest / 2**20:.2f} MiB with every MatMul in 4 bits",
                          f"give a --size of at least {smallest / 2**20 * 1.01:.2f}MiB, or prune the model (--prune)")


def _refuse_below_smallest(source: Path, nodes: list[str], block: int, budget_bytes: int, fixed_bytes: int) -> None:
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    dims = {init.name: [int(d) for d in init.dims] for init in model.graph.initializer}
    wanted = set(nodes)
    shapes = [dims[n.input[1]] for n in model.graph.node if n.name in wanted]  # K x N
    _refuse(budget_bytes, fixed_bytes + sum(matmul_bytes(n, k, 4, block) for k, n in shapes))


def choose_eight_bit(costs: Costs, budget_bytes: int, fixed_bytes: int) -> dict[str, Any]:
    """The MatMuls to keep in 8 bits so the file fits ``budget_bytes``, given the bytes that are no MatMul's
    (``fixed_bytes``); facts for the manifest (``eight_bit``: the node names)."""
    from edgeopt.exporters.gguf.mix_choose import choose_types

    _refuse(budget_bytes, fixed_bytes + sum(o[0].bytes for o in costs.options.values()))
    choice = choose_types(costs.options, budget_bytes - fixed_bytes)
    return {"eight_bit": sorted(n for n, t in choice.types.items() if t == "int8"),
            "predicted_kl": float(f"{choice.cost:.6g}"), "predicted_bytes": fixed_bytes + choice.bytes,
            "group_kl": {g: float(f"{kl:.4g}") for g, kl in sorted(costs.group_kl.items())}}


def quantize_int4_sized(source: Path, dst: Path, model_dir: Path, budget_bytes: int, preset: Any,
                        keep_fp: list[str], block: int, accuracy_level: int | None, energy: InputEnergy | None,
                        chunks: list[list[int]], threads: int = 2) -> dict[str, Any]:
    """``source`` quantized into ``dst`` with the 8-bit MatMuls chosen to fit ``budget_bytes`` (the ONNX files'
    bytes); when the written file's other bytes differ from the estimate, chosen again with them and rewritten."""
    from edgeopt.exporters.onnx import quantize as q

    nodes = q.weight_matmuls(source, q.matching_nodes(source, keep_fp))
    fixed = _other_bytes_estimate(source, nodes, keep_fp)
    _refuse_below_smallest(source, nodes, block, budget_bytes, fixed)  # before minutes of measuring
    costs = measure_costs(source, nodes, model_dir, energy, chunks, block, threads)
    for _attempt in range(2):
        sized = choose_eight_bit(costs, budget_bytes, fixed)
        info = q.quantize_int4(source, dst, preset, keep_fp, block_size=block, accuracy_level=accuracy_level,
                               mix="sized", algorithm="weighted", energy=energy, table=True,
                               eight_bit_nodes=sized["eight_bit"])
        written = _onnx_bytes(dst)
        if budget_bytes * (1 - SIZE_TOLERANCE) <= written <= budget_bytes:
            break
        fixed += written - sized["predicted_bytes"]  # what the estimate missed, measured
    else:
        raise ConfigError(f"the INT4 ONNX file came out at {written / 2**20:.2f} MiB for --size "
                          f"{budget_bytes / 2**20:.2f}MiB, twice", "report this model to edgeopt")
    return {**info, "size": {"budget_bytes": budget_bytes, "written_bytes": written, **sized}}


def _onnx_bytes(dst: Path) -> int:
    return sum(p.stat().st_size for p in dst.parent.iterdir() if p.name.startswith(dst.name))


def _other_bytes_estimate(source: Path, nodes: list[str], keep_fp: list[str]) -> int:
    """The bytes of the INT4 file that are no MatMul's: the float source less its MatMul weights, with the token
    table (the largest float Gather) in 8-bit blocks of 32 unless --keep-fp keeps it."""
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    dims = {init.name: [int(d) for d in init.dims] for init in model.graph.initializer if init.data_type == 1}
    wanted = set(nodes)
    by_node = {n.name: n.input[1] for n in model.graph.node if n.name in wanted}
    other = _onnx_bytes(source) - sum(4 * int(np.prod(dims[by_node[n]])) for n in nodes)
    tables = [dims[n.input[0]] for n in model.graph.node
              if n.op_type == "Gather" and len(dims.get(n.input[0], [])) == 2]
    if tables and "embeddings" not in keep_fp and "embed_tokens" not in keep_fp:
        vocab, width = max(tables, key=lambda d: d[0] * d[1])
        if width % EIGHT_BIT_BLOCK == 0:
            other += vocab * (width // EIGHT_BIT_BLOCK) * (EIGHT_BIT_BLOCK + 4) - 4 * vocab * width
    return other


def measure_group_kl(model_dir: Path, nodes: list[Node], four_bit: dict[str, np.ndarray],
                     chunks: list[list[int]], threads: int) -> dict[str, float]:
    """Per group: the mean KL the checkpoint's next-token distributions gain when that group's weights are their
    4-bit blocks (torch, float32, CPU)."""
    import torch

    from edgeopt.passes.measure import load_causal_lm

    torch.set_num_threads(threads)
    model = load_causal_lm(model_dir, torch.float32)
    model.eval()

    def log_probs() -> list[torch.Tensor]:
        with torch.no_grad():
            return [torch.log_softmax(model(input_ids=torch.tensor([c]), use_cache=False).logits[0].double(), -1)
                    for c in chunks]

    reference = log_probs()
    result: dict[str, float] = {}
    for group in sorted({n.group for n in nodes}):
        members = [n for n in nodes if n.group == group]
        saved = {}
        for n in members:
            linear = model.get_submodule(n.module)
            saved[n.module] = linear.weight.data
            linear.weight.data = torch.from_numpy(np.ascontiguousarray(four_bit[n.name], dtype=np.float32))
        try:
            kls = [(ref.exp() * (ref - got)).sum(-1) for ref, got in zip(reference, log_probs())]
        finally:
            for module, data in saved.items():
                model.get_submodule(module).weight.data = data
        result[group] = max(float(torch.cat(kls).mean()), 0.0)
    return result
