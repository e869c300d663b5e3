"""``--quant MIX``: a GGUF whose tensor types are chosen by measured sensitivity to fit a byte budget.

llama.cpp's mixes (Q4_K_M, ...) are fixed recipes: attn_v and ffn_down get more bits in some layers,
whatever the model. Here the model says where bits matter: every tensor's rounding error at every type
of its palette (exporters/gguf/mix_palette.py) is computed, each group of tensors' effect on the output
is measured as KL on the calibration text (exporters/gguf/mix_measure.py), and the types that fit the
budget at the lowest predicted KL are chosen (exporters/gguf/mix_choose.py). llama.cpp's quantizer writes
the file with those types and the importance matrix, so any llama.cpp reads it.

Cost: one quantization per palette type, and per group (22 for a 30-layer model: 7 roles x 3 bands, and
the embeddings) a quantization and two 512-token forward passes: about ten minutes for a 135M model on
two shared cores (docs/gguf-mix.md).
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError, ExportError
from edgeopt.progress import progress
from edgeopt.exporters.gguf.calibration import Calibration
from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.mix_choose import Option, choose_types
from edgeopt.exporters.gguf.mix_measure import (QuantizedTensor, ReferenceDistribution, group_of, quantized_tensors,
                                        weighted_errors)
from edgeopt.exporters.gguf.mix_palette import PALETTE_TYPES, REFERENCE_TYPE, palette, smallest_mix_bytes
from edgeopt.exporters.gguf.quant_types import type_bytes
from edgeopt.exporters.gguf.quantize import quantize_gguf

DEFAULT_BANDS = 3  # layer bands per tensor role whose sensitivity is measured (30 layers: 10 a band)
DEFAULT_SENSITIVITY_CHUNKS = 2  # 1,024 tokens a group: its forward passes are most of a mix's time
# The llama_ftype written into the file (general.file_type, which tools display) for the type most of its
# weights got: what llama.cpp itself would guess from the tensors.
_FILE_TYPE_OF = {"IQ3_S": "IQ3_S", "IQ4_XS": "IQ4_XS", "Q4_K": "Q4_K_S", "Q5_K": "Q5_K_S", "Q6_K": "Q6_K",
                 "Q8_0": "Q8_0", "IQ4_NL": "IQ4_NL", "Q5_0": "Q5_0"}


def export_mix(model_dir: Path, unquantized: Path, dst: Path, calibration: Calibration,
               options: dict[str, Any]) -> dict[str, Any]:
    """The exporter's ``--quant MIX``: sensitivity measured on the calibration's first chunks, budget
    ``options['mix_size_bytes']`` (default: the planner's Q4_K_M size of the model)."""
    from edgeopt.model_spec import load_model_spec
    from edgeopt.exporters.gguf.quant_types import MIX_DEFAULT_SIZE_OF, estimate_gguf_bytes

    spec = load_model_spec(str(model_dir))
    budget = int(options.get("mix_size_bytes") or estimate_gguf_bytes(spec, MIX_DEFAULT_SIZE_OF))
    smallest = smallest_mix_bytes(spec)
    if budget < smallest:  # refused before minutes of measuring; choose_types has the exact check
        raise ConfigError(f"--size {budget / 2**20:.1f}MiB is below the smallest mix of {spec.source}, about "
                          f"{smallest / 2**20:.1f} MiB with every tensor at its smallest type",
                          f"give a --size of at least {smallest / 2**20 * 1.01 + 1:.0f}MiB, or prune the model (--prune)")
    return make_mix(unquantized, dst, budget, calibration.matrix, calibration.chunks[:DEFAULT_SENSITIVITY_CHUNKS],
                    spec.num_layers, threads=int(options.get("threads", 2)))


@dataclass(frozen=True)
class Sensitivity:
    scales: dict[str, float]  # group -> KL per unit of weighted rounding error
    group_kl: dict[str, float]  # group -> KL its smallest types add to the all-Q8_0 reference
    error_free_kl: float  # the reference's KL less what its own rounding errors predict: the prediction's offset


def make_mix(unquantized: Path, dst: Path, budget_bytes: int, imatrix: ImportanceMatrix,
             token_chunks: list[list[int]], n_layers: int, threads: int = 2,
             bands: int = DEFAULT_BANDS) -> dict[str, Any]:
    """Write ``dst`` (at most ``budget_bytes``) from the unquantized GGUF; return facts for the manifest."""
    work = dst.parent / ".edgeopt-mix"
    work.mkdir(parents=True, exist_ok=True)
    try:
        reference_file = work / "reference.gguf"
        quantize_gguf(unquantized, reference_file, REFERENCE_TYPE, threads, imatrix, types={})
        tensors = quantized_tensors(reference_file, REFERENCE_TYPE)
        if not tensors:
            raise ExportError(f"{unquantized} has no tensor llama.cpp quantizes", "export it as F16 or Q8_0")
        overhead = reference_file.stat().st_size - sum(type_bytes(REFERENCE_TYPE, t.weights) for t in tensors)
        errors = _errors_per_type(unquantized, reference_file, tensors, imatrix, work, threads)
        groups: dict[str, list[QuantizedTensor]] = {}
        for t in tensors:
            groups.setdefault(group_of(t.name, n_layers, bands), []).append(t)
        sensitivity = _measure_groups(unquantized, reference_file, groups, errors, imatrix, token_chunks, work,
                                      threads)
        options = {t.name: [Option(ttype, type_bytes(ttype, t.weights),
                                   sensitivity.scales[group] * errors[t.name][ttype])
                            for ttype in palette(t.row_length) if ttype in errors[t.name]]
                   for group, members in groups.items() for t in members}
        choice = choose_types(options, budget_bytes - overhead)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by_type: Counter[str] = Counter()
    for t in tensors:
        by_type[choice.types[t.name]] += t.weights
    file_type = _FILE_TYPE_OF[by_type.most_common(1)[0][0]]
    facts = quantize_gguf(unquantized, dst, file_type, threads, imatrix, types=choice.types)
    facts["mix"] = {"budget_bytes": budget_bytes, "file_type": file_type,
                    "predicted_kl": float(f"{sensitivity.error_free_kl + choice.cost:.6g}"),
                    "bands": bands, "sensitivity_tokens": sum(len(c) for c in token_chunks),
                    "group_kl": sensitivity.group_kl, "types": dict(sorted(choice.types.items()))}
    return facts


def _errors_per_type(unquantized: Path, reference_file: Path, tensors: list[QuantizedTensor],
                     imatrix: ImportanceMatrix, work: Path, threads: int) -> dict[str, dict[str, float]]:
    """Every tensor's weighted rounding error at every type of its palette, one quantized file per type."""
    importance = imatrix.means()
    errors: dict[str, dict[str, float]] = {t.name: {} for t in tensors}
    for ttype in progress(PALETTE_TYPES, "mix: rounding errors per type"):
        members = {t.name: ttype for t in tensors if ttype in palette(t.row_length)}
        if not members:
            continue
        path = reference_file if ttype == REFERENCE_TYPE else work / f"{ttype}.gguf"
        if path != reference_file:
            quantize_gguf(unquantized, path, REFERENCE_TYPE, threads, imatrix, types=members)
        for name, error in weighted_errors(unquantized, ttype, path, members, importance).items():
            errors[name][ttype] = error
        if path != reference_file:
            path.unlink()
    return errors


def _measure_groups(unquantized: Path, reference_file: Path, groups: dict[str, list[QuantizedTensor]],
                    errors: dict[str, dict[str, float]], imatrix: ImportanceMatrix, token_chunks: list[list[int]],
                    work: Path, threads: int) -> Sensitivity:
    """KL per unit of weighted error for each group, from the KL its smallest types add to the reference."""
    from edgeopt.exporters.gguf.scorer import GGUFScorer

    context = max(len(c) for c in token_chunks)

    def kl_of(path: Path) -> float:
        scorer = GGUFScorer(path, context=context, threads=threads)
        try:
            return reference.mean_kl(scorer)
        finally:
            scorer.close()

    original = GGUFScorer(unquantized, context=context, threads=threads)
    try:
        reference = ReferenceDistribution(original, token_chunks)
    finally:
        original.close()
    reference_kl = kl_of(reference_file)
    scales: dict[str, float] = {}
    group_kl: dict[str, float] = {}
    for group, members in progress(sorted(groups.items()), "mix: sensitivity per tensor group"):
        smallest = {t.name: palette(t.row_length)[0] for t in members}
        path = work / "group.gguf"
        quantize_gguf(unquantized, path, REFERENCE_TYPE, threads, imatrix, types=smallest)
        added_kl = max(kl_of(path) - reference_kl, 0.0)  # below the reference is noise: no cost
        path.unlink()
        added_error = sum(errors[t.name][smallest[t.name]] - errors[t.name][REFERENCE_TYPE] for t in members)
        scales[group] = added_kl / added_error if added_error > 0 else 0.0
        group_kl[group] = float(f"{added_kl:.4g}")
    own_errors = sum(scales[group] * errors[t.name][REFERENCE_TYPE] for group, members in groups.items()
                     for t in members)
    return Sensitivity(scales, group_kl, reference_kl - own_errors)
