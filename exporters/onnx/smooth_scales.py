"""Per-channel scales moved from a norm's output into the weights that read it, before ``--size`` rounds them.

MatMulNBits computes in int8 at accuracy level 4 (the CPU preset): onnxruntime quantizes each block of 32/64
inputs to 8 bits by the block's largest value. A trained decoder's normalized activations have a few channels
tens of times the others (SmolLM2-135M's final norm: rms 32 in one channel, 15-16 in two, under 9 in the other 573), and a block
holding one leaves the other inputs a few levels each: on SmolLM2-135M that int8 compute cost the ``--size`` file
0.0055 of its 0.0319 held-out KL, 0.0017 of it in the tied output layer (docs/onnx-quantization-and-quality-floor.md).

An RMSNorm multiplies every channel by its gamma, so dividing gamma by ``s`` and multiplying the columns of every
weight that reads that norm by ``s`` computes the same function in floats (SmoothQuant, Xiao et al. 2022). With
``s_j = rms(x_j)^alpha / max|W_:j|^(1 - alpha)`` (geometric mean 1) the loud channels come down and their weights'
columns go up. A tied token table is also the embedding: its rows are stored smoothed and multiplied back by
``1 / s`` after the lookup (one Mul of the hidden width per token).

Which norms: exporters/onnx/int4_weights.output_layers (the output layer's only: its weights are 8-bit, where the
larger columns cost little; the 4-bit q/k/v and gate/up measured worse with it). The rest of ``--size`` sees the
smoothed weights and inputs (calibration statistics divided by ``s``), so its errors are the same functions of the
rounding as before; torch's group KL divides each weight's blocks by ``s`` again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edgeopt.exporters.input_energy import InputEnergy

# how much of the activations' spread moves into the weights: SmolLM2-135M's --size file (GPTQ) with its output
# layer smoothed afterwards, held-out KL by alpha 0.2 / 0.27 / 0.35 / 0.42 / 0.5 / 0.7 (rms statistics): 0.0314 / 0.0310 / 0.0300 / 0.0300 /
# 0.0307 / 0.0321 (none: 0.0319)
ALPHA = 0.4
NORMS = {"SkipSimplifiedLayerNormalization": 2, "SimplifiedLayerNormalization": 1}  # op -> gamma's input index
FLOOR = 1e-4  # the quietest channel's rms counted as at least this fraction of the loudest


@dataclass(frozen=True)
class NormScales:
    """One norm's smoothing: its gamma divided by ``scales`` (written as an initializer of its own), the columns of
    the weights ``readers`` (Weight names of exporters/onnx/int4/sized.py) multiplied by them."""

    norm: str
    gamma: str
    readers: tuple[str, ...]
    scales: np.ndarray  # float32 (K,)


def smoothable_norms(model: Any, weight_of_reader: dict[str, str]) -> list[tuple[Any, str, tuple[str, ...]]]:
    """(norm node, its gamma initializer, the weights reading it) for every RMSNorm whose normalized output only
    weight MatMuls read (``weight_of_reader``: MatMul node name -> Weight name), and Shape nodes."""
    stored = {init.name for init in model.graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = []
    for node in model.graph.node:
        if node.op_type not in NORMS or len(node.input) <= NORMS[node.op_type]:
            continue
        gamma = node.input[NORMS[node.op_type]]
        consumers = [c for c in readers.get(node.output[0], []) if c.op_type != "Shape"]  # a shape is unchanged
        if gamma not in stored or not consumers \
                or any(c.op_type != "MatMul" or c.input[0] != node.output[0] or c.name not in weight_of_reader
                       for c in consumers) or node.output[0] in {o.name for o in model.graph.output}:
            continue
        found.append((node, gamma, tuple(weight_of_reader[c.name] for c in consumers)))
    return found


def smoothing_scales(norms: list[tuple[Any, str, tuple[str, ...]]], weights: dict[str, np.ndarray],
                     mean_square: dict[str, np.ndarray | None], alpha: float = ALPHA) -> list[NormScales]:
    """``s`` per norm from its output's rms per channel (``mean_square`` per reading weight: all read the same
    input) and the largest weight of each column over its readers (``weights``: N x K), geometric mean 1."""
    planned = []
    for node, gamma, readers in norms:
        measured = [mean_square[r] for r in readers if mean_square.get(r) is not None]
        if not measured:
            continue
        rms = np.sqrt(np.maximum(measured[0].astype(np.float64), 0.0))
        rms = np.maximum(rms, FLOOR * rms.max() + 1e-30)
        column_max = np.max([np.abs(weights[r]).max(axis=0) for r in readers], axis=0).astype(np.float64)
        scales = rms ** alpha / np.maximum(column_max, 1e-12) ** (1 - alpha)
        scales /= np.exp(np.log(scales).mean())
        planned.append(NormScales(node.name, gamma, readers, scales.astype(np.float32)))
    return planned


def column_scales(planned: list[NormScales]) -> dict[str, np.ndarray]:
    """Weight name -> the scales its columns were multiplied by."""
    return {reader: p.scales for p in planned for reader in p.readers}


def smoothed_energy(energy: InputEnergy, scales_of_module: dict[str, np.ndarray]) -> InputEnergy:
    """The statistics of the smoothed inputs ``x / s``: mean squares / s^2, x x^T / (s s^T). Modules that share one
    Gram array (q/k/v) share its smoothed copy."""
    sums = dict(energy.sums)
    grams = dict(energy.grams) if energy.grams is not None else None
    converted: dict[int, np.ndarray] = {}
    for module, s in scales_of_module.items():
        if module not in sums:
            continue
        sums[module] = sums[module] / np.square(s.astype(np.float64))
        if grams is not None and module in grams:
            original = grams[module]
            if id(original) not in converted:
                converted[id(original)] = (original / np.outer(s, s)).astype(np.float32)
            grams[module] = converted[id(original)]
    return replace(energy, sums=sums, grams=grams)


def apply_to_graph(model: Any, planned: list[NormScales], table_output: str | None,
                   table_scales: np.ndarray | None) -> None:
    """Give each planned norm its gamma divided by its scales (in place; an initializer of its own: an exporter
    may share one gamma between norms whose weights are equal); with a smoothed table, multiply the rows the lookup
    ``table_output`` yields by 1 / scales."""
    from onnx import helper, numpy_helper

    stored = {init.name: init for init in model.graph.initializer}
    nodes = {n.name: n for n in model.graph.node}
    for p in planned:
        node, gamma = nodes[p.norm], numpy_helper.to_array(stored[p.gamma])
        name = f"{p.norm}_smoothed_gamma"
        model.graph.initializer.append(numpy_helper.from_array((gamma / p.scales).astype(gamma.dtype), name))
        node.input[NORMS[node.op_type]] = name
    used = {name for n in model.graph.node for name in n.input}
    for gamma in {p.gamma for p in planned} - used:
        model.graph.initializer.remove(stored[gamma])
    if table_output is None or table_scales is None:
        return
    producer = next(n for n in model.graph.node if table_output in n.output)
    smoothed = f"{table_output}_smoothed"
    producer.output[list(producer.output).index(table_output)] = smoothed
    inverse = f"{producer.name}_unsmooth"
    model.graph.initializer.append(numpy_helper.from_array((1.0 / table_scales).astype(np.float32), inverse))
    at = list(model.graph.node).index(producer)
    model.graph.node.insert(at + 1, helper.make_node("Mul", [smoothed, inverse], [table_output], name=inverse))


def smooth(model: Any, weights: list[Any], table_head: str | None, energy: InputEnergy, alpha: float = ALPHA,
           eligible: set[str] | None = None) -> tuple[list[NormScales], list[Any], InputEnergy]:
    """Plan the smoothing of ``model``'s norms over ``weights`` (exporters/onnx/int4_weights.Weight; ``table_head``: the
    MatMul node of a tied output layer, which reads the table's weight; ``eligible``: the weights whose norms may be
    smoothed, all when None) and return the plan, the weights with their columns scaled and the statistics of the
    scaled inputs."""
    by_name = {w.name: w for w in weights}
    reader_to_weight = {w.name: w.name for w in weights if not w.table and (eligible is None or w.name in eligible)}
    table = next((w for w in weights if w.table), None)
    if table is not None and table_head is not None and (eligible is None or table.name in eligible):
        reader_to_weight[table_head] = table.name
    planned = smoothing_scales(smoothable_norms(model, reader_to_weight), {n: w.weight for n, w in by_name.items()},
                               {n: energy.mean(w.energy_module) for n, w in by_name.items()}, alpha)
    scales = column_scales(planned)
    scaled = [replace(w, weight=(w.weight * scales[w.name][None, :]).astype(np.float32)) if w.name in scales else w
              for w in weights]
    return planned, scaled, smoothed_energy(energy, {by_name[n].energy_module: s for n, s in scales.items()})
