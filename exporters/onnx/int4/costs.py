"""What each width of each weight costs, for ``--size`` (exporters/onnx/int4/sized.py, steps 1 and 2): its blocks at
4 bits (two block sizes) and at 8 bits, their bytes, and their predicted KL: each width's weighted error, turned into
KL by the KL its group's 4-bit blocks add in torch over the error they add."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.exporters.input_energy import InputEnergy
from edgeopt.exporters.onnx.int4.gptq import gptq_int4_blocks, output_error
from edgeopt.exporters.onnx.int4.search import Int4Blocks, search_int4_blocks
from edgeopt.exporters.onnx.int4.weights import Weight
from edgeopt.exporters.onnx.nbits_blocks import Int8Blocks, eight_bit_blocks, four_bit_nbytes

EIGHT_BIT_BLOCKS = (64, 32)  # 8-bit blocks: the largest of these that divides the row
WIDE_FACTOR = 2  # the wider 4-bit blocks offered beside --int4-block-size's
INT4_BLOCK_LIMITS = (16, 32, 64, 128, 256)  # MatMulNBits' and GatherBlockQuantized's block sizes
SENSITIVITY_CHUNKS = 2
# how 4-bit blocks are rounded. --size's default is GPTQ with --calibration-data (held-out KL 0.0319 vs 0.0610 at
# GGUF Q4_K_M's size on SmolLM2-135M), the weighted search with generated text, whose x x^T GPTQ measured no better
# (0.0617): exporters/onnx/exporter.int4_algorithm, docs/onnx-quantization-and-quality-floor.md
ALGORITHMS = ("weighted", "gptq")
Blocks = Int4Blocks | Int8Blocks


def eight_bit_block(k_in: int) -> int:
    return next((b for b in EIGHT_BIT_BLOCKS if k_in % b == 0), EIGHT_BIT_BLOCKS[-1])


def weighted_error(weight: np.ndarray, approximation: np.ndarray, importance: np.ndarray | None) -> float:
    squared = np.square(weight - approximation[:, :weight.shape[1]], dtype=np.float64).sum(axis=0)
    return float(squared @ importance if importance is not None else squared.sum())


@dataclass(frozen=True)
class Costs:
    options: dict[str, list[Any]]  # weight -> an Option per width (exporters/gguf/mix/choose.Option)
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


def measure_costs(weights: list[Weight], model_dir: Path, energy: InputEnergy | None,
                  chunks: list[list[int]], block: int, threads: int = 2, algorithm: str = ALGORITHMS[0],
                  smoothed: dict[str, np.ndarray] | None = None) -> Costs:
    """Every weight's blocks, bytes and predicted KL at 4 and at 8 bits; ``smoothed``: weight name -> the scales
    its columns were multiplied by (exporters/onnx/smooth_scales.py), divided out again for torch's group KL."""
    from edgeopt.exporters.gguf.mix.choose import Option
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
    options = {w.name: [Option(t, nbytes(b), scales[w.group] * errors[w.name][t]) for t, b in blocks[w.name].items()]
               for w in weights}
    return Costs(options, group_kl, blocks)


def nbytes(blocks: Blocks) -> int:
    """Bytes the file stores for ``blocks``."""
    return blocks.nbytes if isinstance(blocks, Int8Blocks) else four_bit_nbytes(blocks)


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
