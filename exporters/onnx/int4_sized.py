"""``--format onnx --quant int4 --size``: each MatMul's width, and the token table's, chosen by measured
sensitivity to fit a size.

``--int4-mix sensitive-int8`` keeps fixed roles (v, o, down) in 8 bits whatever the model. Here, as the GGUF mix
does (exporters/gguf/mix.py), the model says where bits matter:

1. **Blocks and weighted error at every width**, for every MatMul and for the token table (stored once for a
   tied output layer, exporters/onnx/embedding_quant.py): 4-bit blocks rounded by GPTQ (``--int4-algorithm gptq``,
   exporters/onnx/int4_gptq.py: each column's rounding error compensated on the columns after it, given the
   calibration inputs' x x^T; its error the mean squared change of the layer's output) or by the weighted search
   (the default, exporters/onnx/int4_search.py: each weight to its nearest level; its error
   weighted per column by the mean squared input; a tied table weighed by the output layer's inputs) in blocks of
   --int4-block-size and of twice that, and symmetric 8-bit blocks of 64 (32 where 64 does not divide the row: at
   8 bits a larger block's coarser scale costs next to nothing and saves half a bit a weight), each compared with
   the float weight, every column's squared error weighted by the calibration text's mean squared input.
2. **Measured KL per group** (a role in a band of layers, ``mlp.down_proj@10-19``; the table on its own): the
   checkpoint in torch with that group's weights replaced by their 4-bit blocks, scored on calibration chunks
   against the unchanged checkpoint. The KL it adds over the error it added turns each weight's errors into
   predicted KL.
3. **The choice**: one width per weight, the lowest predicted KL within the budget (the GGUF mix's exact
   multiple-choice knapsack, exporters/gguf/mix_choose.py), each option's bytes those of its blocks.
4. **The file**: the measured blocks written as MatMulNBits / GatherBlockQuantized (exporters/onnx/nbits_blocks.py),
   not searched again. The bytes that are no weight's (graph, norms, rotary tables) are estimated from the float
   source, then taken from the written file, and the choice made again when the file misses the size.

The table in 4 bits frees 40% of its 8-bit bytes (on SmolLM2-135M 12 MB, 8 bits for about a quarter of the
layers' weights), which is why it is a choice and not a fixed 8 bits as in the other INT4 paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ConfigError
from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.embedding_quant import Table, find_table, table_weight, write_table
from edgeopt.exporters.onnx.int4_gptq import gptq_int4_blocks, output_error
from edgeopt.exporters.onnx.int4_rewrite import module_of
from edgeopt.exporters.onnx.int4_search import Int4Blocks, search_int4_blocks
from edgeopt.exporters.onnx.nbits_blocks import (Int8Blocks, eight_bit_blocks, ensure_microsoft_opset,
                                                 four_bit_nbytes, write_matmul_nbits)
from edgeopt.exporters.onnx.smooth_scales import NormScales, apply_to_graph, column_scales, smooth

EIGHT_BIT_BLOCKS = (64, 32)  # 8-bit blocks: the largest of these that divides the row
WIDE_FACTOR = 2  # the wider 4-bit blocks offered beside --int4-block-size's
INT4_BLOCK_LIMITS = (16, 32, 64, 128, 256)  # MatMulNBits' and GatherBlockQuantized's block sizes
BANDS = 3  # layer bands per role whose sensitivity is measured, as the GGUF mix
SENSITIVITY_CHUNKS = 2
SIZE_TOLERANCE = 0.01  # a file within 1% under the size asked, never over it
# how 4-bit blocks are rounded. --size's default is GPTQ with --calibration-data (held-out KL 0.0319 vs 0.0610 at
# GGUF Q4_K_M's size on SmolLM2-135M), the weighted search with generated text, whose x x^T GPTQ measured no better
# (0.0617): exporters/onnx/exporter.int4_algorithm, docs/onnx-quantization-and-quality-floor.md
ALGORITHMS = ("weighted", "gptq")
_LAYER = re.compile(r"^(.*?layers)\.(\d+)\.(.+)$")
Blocks = Int4Blocks | Int8Blocks


def eight_bit_block(k_in: int) -> int:
    return next((b for b in EIGHT_BIT_BLOCKS if k_in % b == 0), EIGHT_BIT_BLOCKS[-1])


def matmul_bytes(n_out: int, k_in: int, bits: int, block: int) -> int:
    """Bytes MatMulNBits stores for an N x K weight: 4 bits + an fp32 scale per block and 4-bit zero points
    (a row's packed two to a byte); 8 bits (symmetric, no zero points) + an fp32 scale per block."""
    blocks = -(-k_in // block)
    if bits == 8:
        return n_out * blocks * (block + 4)
    return n_out * blocks * (block // 2 + 4) + n_out * -(-blocks // 2)


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


def weighted_error(weight: np.ndarray, approximation: np.ndarray, importance: np.ndarray | None) -> float:
    squared = np.square(weight - approximation[:, :weight.shape[1]], dtype=np.float64).sum(axis=0)
    return float(squared @ importance if importance is not None else squared.sum())


@dataclass(frozen=True)
class Costs:
    options: dict[str, list[Any]]  # weight -> an Option per width (exporters/gguf/mix_choose.Option)
    group_kl: dict[str, float]  # group -> KL its 4-bit blocks add to the float checkpoint
    blocks: dict[str, dict[str, Blocks]]  # weight -> {"int4": ..., "int4-wide": ..., "int8": ...}: what is written


def width_blocks(w: Weight, importance: np.ndarray | None, block: int,
                 gram: np.ndarray | None = None) -> dict[str, Blocks]:
    """Every width ``w`` can take: 4 bits in blocks of ``block``, 4 bits in blocks of WIDE_FACTOR x ``block`` (an
    fp32 scale a block is a bit a weight at 32; where the weights allow, half a bit buys 8 bits elsewhere), 8 bits.
    With its inputs' ``gram``, the 4-bit blocks are GPTQ's; else the weighted search's."""
    def four_bit(size: int) -> Int4Blocks:
        return search_int4_blocks(w.weight, importance, size) if gram is None else gptq_int4_blocks(w.weight, gram, size)

    widths: dict[str, Blocks] = {"int4": four_bit(block)}
    wide = block * WIDE_FACTOR
    if wide in INT4_BLOCK_LIMITS and (not w.table or w.weight.shape[1] % wide == 0):
        widths["int4-wide"] = four_bit(wide)
    widths["int8"] = eight_bit_blocks(w.weight, eight_bit_block(w.weight.shape[1]))
    return widths


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


def measure_costs(weights: list[Weight], model_dir: Path, energy: InputEnergy | None,
                  chunks: list[list[int]], block: int, threads: int = 2, algorithm: str = ALGORITHMS[0],
                  smoothed: dict[str, np.ndarray] | None = None) -> Costs:
    """Every weight's blocks, bytes and predicted KL at 4 and at 8 bits; ``smoothed``: weight name -> the scales
    its columns were multiplied by (exporters/onnx/smooth_scales.py), divided out again for torch's group KL."""
    from edgeopt.exporters.gguf.mix_choose import Option
    from edgeopt.exporters.input_energy import torch_threads_left_free

    import torch

    errors: dict[str, dict[str, float]] = {}
    blocks: dict[str, dict[str, Blocks]] = {}
    torch.set_num_threads(threads)
    with torch_threads_left_free():  # small torch operations by the thousand: barriers stall beside a busy neighbour
        for w in weights:
            importance = energy.mean(w.energy_module) if energy else None
            # an untied table is read a row per token (no inputs to compensate over): the weighted search's blocks
            gram = energy.gram(w.energy_module) if energy and algorithm == "gptq" else None
            blocks[w.name] = width_blocks(w, importance, block, gram)
            errors[w.name] = {t: weighted_error(w.weight, b.dequantized(), importance) if gram is None
                              else output_error(w.weight, b.dequantized(), gram) for t, b in blocks[w.name].items()}
        group_kl = measure_group_kl(model_dir, weights, blocks, chunks[:SENSITIVITY_CHUNKS], smoothed or {})
    scales = {}
    for group, kl in group_kl.items():
        added = sum(errors[w.name]["int4"] - errors[w.name]["int8"] for w in weights if w.group == group)
        scales[group] = kl / added if added > 0 else 0.0
    options = {w.name: [Option(t, _nbytes(b), scales[w.group] * errors[w.name][t]) for t, b in blocks[w.name].items()]
               for w in weights}
    return Costs(options, group_kl, blocks)


def _nbytes(blocks: Blocks) -> int:
    return blocks.nbytes if isinstance(blocks, Int8Blocks) else four_bit_nbytes(blocks)


def _refuse(budget_bytes: int, smallest: int) -> None:
    if smallest > budget_bytes:
        raise ConfigError(f"--size {budget_bytes / 2**20:.2f}MiB is below this model's smallest INT4 ONNX file, "
                          f"about {smallest / 2**20:.2f} MiB with every MatMul and the token table in 4 bits",
                          f"give a --size of at least {smallest / 2**20 * 1.01:.2f}MiB, or prune the model (--prune)")


def choose_widths(costs: Costs, budget_bytes: int, fixed_bytes: int) -> dict[str, Any]:
    """The width of every weight so the file fits ``budget_bytes``, given the bytes that are no weight's
    (``fixed_bytes``); facts for the manifest (``eight_bit``: the MatMuls kept in 8 bits)."""
    from edgeopt.exporters.gguf.mix_choose import choose_types

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


def measure_group_kl(model_dir: Path, weights: list[Weight], blocks: dict[str, dict[str, Blocks]],
                     chunks: list[list[int]], smoothed: dict[str, np.ndarray] | None = None) -> dict[str, float]:
    """Per group: the mean KL the checkpoint's next-token distributions gain when that group's weights are their
    4-bit blocks (torch, float32, CPU, on the threads set); a smoothed weight's blocks divided by its column
    scales (``smoothed``), the checkpoint's norms being unchanged."""
    import torch

    from edgeopt.measuring.torch_metrics import load_causal_lm

    model = load_causal_lm(model_dir, torch.float32)
    model.eval()

    def log_probs() -> list[torch.Tensor]:
        with torch.no_grad():
            return [torch.log_softmax(model(input_ids=torch.tensor([c]), use_cache=False).logits[0].double(), -1)
                    for c in chunks]

    reference = log_probs()
    result: dict[str, float] = {}
    for group in sorted({w.group for w in weights}):
        # a tied table: the embedding and the output layer share one parameter, so every original is taken before
        # anything is replaced (taken after, the output layer's "original" is the 4-bit table, left in place for
        # every group measured after it)
        replaced = [(module, w) for w in weights if w.group == group for module in w.modules]
        saved = {module: model.get_submodule(module).weight.data for module, _ in replaced}
        for module, w in replaced:
            four = blocks[w.name]["int4"].dequantized()[:, :w.weight.shape[1]]
            if smoothed and w.name in smoothed:
                four = four / smoothed[w.name][None, :]
            model.get_submodule(module).weight.data = torch.from_numpy(np.ascontiguousarray(four))
        try:
            kls = [(ref.exp() * (ref - got)).sum(-1) for ref, got in zip(reference, log_probs())]
        finally:
            for module, data in saved.items():
                model.get_submodule(module).weight.data = data
        result[group] = max(float(torch.cat(kls).mean()), 0.0)
    return result
