"""``--format onnx --quant int4 --size``: each MatMul's width, and the token table's, chosen by measured
sensitivity to fit a size.

``--int4-mix sensitive-int8`` keeps fixed roles (v, o, down) in 8 bits whatever the model. Here, as the GGUF mix
does (exporters/gguf/mix/build.py), the model says where bits matter:

1. **Blocks and weighted error at every width**, for every MatMul and for the token table (stored once for a
   tied output layer, exporters/onnx/embedding_quant.py): 4-bit blocks rounded by GPTQ (``--int4-algorithm gptq``,
   exporters/onnx/int4/gptq.py: each column's rounding error compensated on the columns after it, given the
   calibration inputs' x x^T; its error the mean squared change of the layer's output) or by the weighted search
   (the default, exporters/onnx/int4/search.py: each weight to its nearest level; its error
   weighted per column by the mean squared input; a tied table weighed by the output layer's inputs) in blocks of
   --int4-block-size and of twice that, and symmetric 8-bit blocks of 64 (32 where 64 does not divide the row: at
   8 bits a larger block's coarser scale costs next to nothing and saves half a bit a weight), each compared with
   the float weight, every column's squared error weighted by the calibration text's mean squared input.
2. **Measured KL per group** (a role in a band of layers, ``mlp.down_proj@10-19``; the table on its own): the
   checkpoint in torch with that group's weights replaced by their 4-bit blocks, scored on calibration chunks
   against the unchanged checkpoint. The KL it adds over the error it added turns each weight's errors into
   predicted KL.
3. **The choice**: one width per weight, the lowest predicted KL within the budget (the GGUF mix's exact
   multiple-choice knapsack, exporters/gguf/mix/choose.py), each option's bytes those of its blocks.
4. **The file**: the measured blocks written as MatMulNBits / GatherBlockQuantized (exporters/onnx/nbits_blocks.py),
   not searched again. The bytes that are no weight's (graph, norms, rotary tables) are estimated from the float
   source, then taken from the written file, and the choice made again when the file misses the size.

The table in 4 bits frees 40% of its 8-bit bytes (on SmolLM2-135M 12 MB, 8 bits for about a quarter of the
layers' weights), which is why it is a choice and not a fixed 8 bits as in the other INT4 paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.embedding_quant import find_table, write_table
from edgeopt.exporters.onnx.int4.costs import (ALGORITHMS, EIGHT_BIT_BLOCKS, INT4_BLOCK_LIMITS, WIDE_FACTOR, Blocks,
                                               Costs, measure_costs)
from edgeopt.exporters.onnx.int4.weights import Weight, find_weights, output_layers
from edgeopt.exporters.onnx.nbits_blocks import ensure_microsoft_opset, write_matmul_nbits
from edgeopt.exporters.onnx.smooth_scales import NormScales, apply_to_graph, column_scales, smooth

__all__ = ["SIZE_TOLERANCE", "choose_widths", "matmul_bytes", "quantize_int4_sized", "write_sized"]

SIZE_TOLERANCE = 0.01  # a file within 1% under the size asked, never over it


def matmul_bytes(n_out: int, k_in: int, bits: int, block: int) -> int:
    """Bytes MatMulNBits stores for an N x K weight: 4 bits + an fp32 scale per block and 4-bit zero points
    (a row's packed two to a byte); 8 bits (symmetric, no zero points) + an fp32 scale per block."""
    blocks = -(-k_in // block)
    if bits == 8:
        return n_out * blocks * (block + 4)
    return n_out * blocks * (block // 2 + 4) + n_out * -(-blocks // 2)


def _refuse(budget_bytes: int, smallest: int) -> None:
    if smallest > budget_bytes:
        raise ConfigError(f"--size {budget_bytes / 2**20:.2f}MiB is below this model's smallest INT4 ONNX file, "
                          f"about {smallest / 2**20:.2f} MiB with every MatMul and the token table in 4 bits",
                          f"give a --size of at least {smallest / 2**20 * 1.01:.2f}MiB, or prune the model (--prune)")


def choose_widths(costs: Costs, budget_bytes: int, fixed_bytes: int) -> dict[str, Any]:
    """The width of every weight so the file fits ``budget_bytes``, given the bytes that are no weight's
    (``fixed_bytes``); facts for the manifest (``eight_bit``: the MatMuls kept in 8 bits)."""
    from edgeopt.exporters.gguf.mix.choose import choose_types

    _refuse(budget_bytes, fixed_bytes + sum(min(o.bytes for o in opts) for opts in costs.options.values()))
    choice = choose_types(costs.options, budget_bytes - fixed_bytes)
    return {"types": choice.types, "predicted_kl": float(f"{choice.cost:.6g}"),
            "predicted_bytes": fixed_bytes + choice.bytes,
            "group_kl": {g: float(f"{kl:.4g}") for g, kl in sorted(costs.group_kl.items())}}


def quantize_int4_sized(source: Path, dst: Path, model_dir: Path, budget_bytes: int, preset: Any,
                        keep_fp: list[str], block: int, accuracy_level: int | None, energy: InputEnergy | None,
                        chunks: list[list[int]], threads: int = 2, algorithm: str = ALGORITHMS[0],
                        smoothing: float = 0.0) -> dict[str, Any]:
    """``source`` quantized into ``dst`` with every weight's width chosen to fit ``budget_bytes`` (the ONNX
    files' bytes); when the written file's other bytes differ from the estimate, chosen again with them and
    rewritten. ``smoothing``: alpha of the norms' scales moved into their weights (0: none;
    exporters/onnx/smooth_scales.py)."""
    import onnx

    from edgeopt.exporters.onnx import quantize as q
    from edgeopt.sources.model_spec import load_model_spec

    if block not in q.INT4_BLOCK_SIZES:
        raise ConfigError(f"--int4-block-size {block} is not supported", f"valid: {', '.join(map(str, q.INT4_BLOCK_SIZES))}")
    level = preset.int4_accuracy_level if accuracy_level is None else accuracy_level
    excluded = q.matching_nodes(source, keep_fp)
    nodes = q.weight_matmuls(source, excluded)
    model = onnx.load(str(source))
    table = find_table(model, excluded)
    table = table if table is not None and table.width % block == 0 and table.width % EIGHT_BIT_BLOCKS[-1] == 0 \
        else None
    weights = find_weights(model, nodes, table, load_model_spec(str(model_dir)).num_layers)
    planned: list[NormScales] = []
    if smoothing and energy is not None:
        head = table.head[1].name if table is not None and table.head else None
        planned, weights, energy = smooth(model, weights, head, energy, smoothing, output_layers(weights))
    fixed = _onnx_bytes(source) - sum(4 * w.weight.size for w in weights)
    smallest = sum(min(matmul_bytes(*w.weight.shape, 4, b) for b in (block, block * WIDE_FACTOR)
                       if b in INT4_BLOCK_LIMITS and (b == block or not w.table or w.weight.shape[1] % b == 0))
                   for w in weights)
    _refuse(budget_bytes, fixed + smallest)  # before measuring
    del model
    costs = measure_costs(weights, model_dir, energy, chunks, block, threads, algorithm, column_scales(planned))
    # The graph's own bytes move a little with the choice (names, attributes, one initializer more or less per
    # weight): aim that much under the size
    margin = min(int(budget_bytes * SIZE_TOLERANCE / 4), 64 * len(weights))
    for _attempt in range(2):
        sized = choose_widths(costs, budget_bytes - margin, fixed)
        table_facts = write_sized(source, dst, weights, costs.blocks, sized["types"], excluded, level, planned)
        written = _onnx_bytes(dst)
        widest = all(t == "int8" for t in sized["types"].values())  # more bytes would buy nothing
        if budget_bytes * (1 - SIZE_TOLERANCE) <= written <= budget_bytes or (widest and written <= budget_bytes):
            break
        fixed += written - sized["predicted_bytes"]  # what the estimate missed, measured
    else:
        raise ConfigError(f"the INT4 ONNX file came out at {written / 2**20:.2f} MiB for --size "
                          f"{budget_bytes / 2**20:.2f}MiB, twice", "report this model to edgeopt")
    types = sized.pop("types")
    matmuls = [w for w in weights if w.name in set(nodes)]
    facts = {"method": "matmul_nbits", "algorithm": algorithm, "bits": 4, "block_size": block, "symmetric": False,
             "accuracy_level": level, "mix": "sized", "excluded_nodes": excluded, "isa": _isa(preset),
             "weighted_nodes": sum(bool(energy and energy.mean(w.energy_module) is not None) for w in weights),
             "int8_nodes": sum(types[w.name] == "int8" for w in matmuls)}
    facts["nodes_without_statistics"] = len(weights) - facts["weighted_nodes"]
    eight = sorted(w.name for w in matmuls if types[w.name] == "int8")
    if smoothing:  # "norms": 0 where no norm could take the scales (an unfused graph)
        facts["smoothing"] = {"alpha": smoothing, "norms": len(planned), "weights": len(column_scales(planned))}
    return {**facts, **({"embedding": table_facts} if table_facts else {}),
            "size": {"budget_bytes": budget_bytes, "written_bytes": written, "eight_bit": eight,
                     "widths": {t: sum(v == t for v in types.values()) for t in sorted(set(types.values()))}, **sized,
                     **({"note": "every weight in 8 bits fits: the file is smaller than the size asked"}
                        if widest and written < budget_bytes * (1 - SIZE_TOLERANCE) else {})}}


def write_sized(source: Path, dst: Path, weights: list[Weight], blocks: dict[str, dict[str, Blocks]],
                types: dict[str, str], excluded: list[str], level: int,
                planned: list[NormScales] | None = None) -> dict[str, Any] | None:
    """The float ``source`` with every weight replaced by the blocks of its chosen width (and the norms of the
    smoothing ``planned`` divided by its scales), saved as ``dst``; the table's facts for the manifest (None when
    the table stays float)."""
    import onnx

    from edgeopt.exporters.onnx.quantize import _external

    model = onnx.load(str(source))
    ensure_microsoft_opset(model)
    by_name = {n.name: n for n in model.graph.node}
    table = find_table(model, excluded)
    table_facts = None
    for w in weights:
        chosen = blocks[w.name][types[w.name]]
        if table is not None and w.name == table.gather.name:
            table_facts = write_table(model, table, chosen, level)
        else:
            write_matmul_nbits(model, by_name[w.name], chosen, w.weight.shape[1], level)
    if planned:
        table_scales = column_scales(planned).get(table.gather.name) if table is not None else None
        apply_to_graph(model, planned, table.gather.output[0] if table_scales is not None else None, table_scales)
    for stale in dst.parent.glob(dst.name + "*"):
        stale.unlink()
    external = _external(source)
    onnx.save(model, str(dst), save_as_external_data=external, all_tensors_to_one_file=True,
              location=dst.name + "_data" if external else None)
    return table_facts


def _isa(preset: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(preset)


def _onnx_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name))
