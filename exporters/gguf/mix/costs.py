"""What every tensor's type costs, measured once per model and calibration, whatever the size asked.

Two measurements (exporters/gguf/mix/measure.py says how each is made): every tensor's weighted rounding error
at every type of its palette, and every group's KL per unit of that error. Neither depends on the budget, so
a curve of sizes (tests/bench/bench_quality_curve.py) measures them once and chooses many times.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.mix.choose import Option
from edgeopt.exporters.gguf.mix.measure import (QuantizedTensor, ReferenceDistribution, group_of, quantized_tensors,
                                                rounding_errors)
from edgeopt.exporters.gguf.mix.palette import REFERENCE_TYPE, palette, probe_type
from edgeopt.exporters.gguf.mix.splice import TensorStore, splice
from edgeopt.exporters.gguf.quant_types import type_bytes
from edgeopt.progress import progress


class KLMeter:
    """Mean KL of a GGUF file against the unquantized model on the calibration chunks (the reference
    distributions are computed once)."""

    def __init__(self, unquantized: Path, token_chunks: list[list[int]], threads: int) -> None:
        from edgeopt.exporters.gguf.scorer import GGUFScorer

        self.context = max(len(c) for c in token_chunks)
        self.threads = threads
        original = GGUFScorer(unquantized, context=self.context, threads=threads)
        try:
            self.reference = ReferenceDistribution(original, token_chunks)
        finally:
            original.close()

    def kl(self, path: Path, threads: int | None = None) -> float:
        """``threads``: the scorer's (default: the meter's), fewer when files are scored side by side."""
        from edgeopt.exporters.gguf.scorer import GGUFScorer

        scorer = GGUFScorer(path, context=self.context, threads=threads or self.threads)
        try:
            return self.reference.mean_kl(scorer)
        finally:
            scorer.close()


@dataclass
class MixCosts:
    tensors: list[QuantizedTensor]
    overhead: int  # file bytes that are not quantized tensor data (metadata, float norms)
    fixed_bytes: int  # the same less the quantized tensors' alignment padding (file_bytes adds each type's)
    alignment: int  # of each tensor's data in the file
    errors: dict[str, dict[str, float]]  # tensor -> type -> weighted squared rounding error
    groups: dict[str, str]  # tensor -> its group (a role in a band of layers)
    scales: dict[str, float]  # group -> KL per unit of weighted rounding error
    group_kl: dict[str, float]  # group -> KL its probe types add to the all-Q8_0 reference
    error_free_kl: float  # the reference's measured KL less what its own errors predict: the prediction's offset

    def predicted(self, tensor: str, ttype: str) -> float:
        return self.scales[self.groups[tensor]] * self.errors[tensor][ttype]

    def options(self, extra_types: dict[str, set[str]] | None = None) -> dict[str, list[Option]]:
        """Every tensor's choices: its palette's types and ``extra_types[tensor]`` (types llama.cpp's own recipes
        give it), each with its bytes and predicted KL; types whose error is unknown are left out."""
        extra_types = extra_types or {}
        choices = {}
        for t in self.tensors:
            types = dict.fromkeys((*palette(t.row_length), *sorted(extra_types.get(t.name, ()))))
            choices[t.name] = [Option(ttype, type_bytes(ttype, t.weights), self.predicted(t.name, ttype))
                               for ttype in types if ttype in self.errors[t.name]]
        return choices

    def add_errors(self, source: Path, types: dict[str, str], importance: dict[str, np.ndarray], threads: int) -> None:
        """Measure the errors of the tensors ``types`` gives a type not measured yet (a llama.cpp recipe's types)."""
        from edgeopt.exporters.gguf.tensor_data import tensor_bytes

        todo = {name: ttype for name, ttype in types.items() if name in self.errors and ttype not in self.errors[name]}
        for info, data in tensor_bytes(source, todo):
            self.errors[info.name] |= rounding_errors(info, data, [todo[info.name]], importance.get(info.name),
                                                      threads).errors

    def file_bytes(self, types: dict[str, str]) -> int:
        """The file llama.cpp writes with ``types`` (tensor -> type; those left out at the reference's type): its
        header and unquantized tensors as the reference's, each tensor's data padded to the alignment."""
        return self.fixed_bytes + sum(_aligned(type_bytes(types.get(t.name, REFERENCE_TYPE), t.weights), self.alignment)
                                      for t in self.tensors)


def measure_costs(unquantized: Path, reference_file: Path, store: TensorStore, imatrix: ImportanceMatrix,
                  meter: KLMeter, n_layers: int, bands: int, threads: int) -> MixCosts:
    """Errors of every tensor at every palette type, and every group's KL per unit of error. ``reference_file``:
    the unquantized file all at REFERENCE_TYPE (llama.cpp's); each tensor's bytes at its probe type are left in
    ``store``."""
    from edgeopt.sources.gguf_metadata import read_gguf_metadata

    tensors = quantized_tensors(reference_file, REFERENCE_TYPE)
    if not tensors:
        raise ExportError(f"{unquantized} has no tensor llama.cpp quantizes", "export it as F16 or Q8_0")
    alignment = int(read_gguf_metadata(reference_file).values.get("general.alignment", 32))
    reference_bytes = reference_file.stat().st_size
    overhead = reference_bytes - sum(type_bytes(REFERENCE_TYPE, t.weights) for t in tensors)
    fixed = reference_bytes - sum(_aligned(type_bytes(REFERENCE_TYPE, t.weights), alignment) for t in tensors)
    errors = _errors_per_type(unquantized, tensors, imatrix, threads, store)
    groups = {t.name: group_of(t.name, n_layers, bands) for t in tensors}
    reference_kl = meter.kl(reference_file)
    names = sorted(set(groups.values()))
    workers = group_workers(threads)

    def probed_kl(index: int) -> float:
        """The KL of the reference with group ``names[index]`` at its probe types."""
        probes = {t.name: probe_type(t.row_length) for t in tensors if groups[t.name] == names[index]}
        path = reference_file.with_name(f"group-{index}.gguf")
        splice(reference_file, probes, store, path)  # = quantize_gguf(..., types=probes), no quantizing
        try:
            return meter.kl(path, max(1, threads // workers))
        finally:
            path.unlink()

    scales: dict[str, float] = {}
    group_kl: dict[str, float] = {}
    with ThreadPoolExecutor(workers) as pool:  # llama.cpp and numpy let go of the GIL
        measured = zip(names, pool.map(probed_kl, range(len(names))))
        for group, kl in progress(measured, "mix: sensitivity per tensor group", len(names)):
            added_kl = max(kl - reference_kl, 0.0)  # below the reference is noise: no cost
            members = [t for t in tensors if groups[t.name] == group]
            added_error = sum(errors[t.name][probe_type(t.row_length)] - errors[t.name][REFERENCE_TYPE]
                              for t in members)
            scales[group] = added_kl / added_error if added_error > 0 else 0.0
            group_kl[group] = float(f"{added_kl:.4g}")
    own_errors = sum(scales[groups[t.name]] * errors[t.name][REFERENCE_TYPE] for t in tensors)
    return MixCosts(tensors, overhead, fixed, alignment, errors, groups, scales, group_kl, reference_kl - own_errors)


def group_workers(threads: int) -> int:
    """Groups scored at once, each on its share of ``threads``: two scorers of one thread each measured the 22
    groups of SmolLM2 in 12-13 s against 16-17 s for one scorer of two threads, whose single-threaded part (the
    group's file spliced and loaded, its distributions compared: a third of each group) left a core idle. The same
    KL to the last digit: ggml's results do not depend on the thread count."""
    return 2 if threads >= 2 else 1


def _errors_per_type(unquantized: Path, tensors: list[QuantizedTensor], imatrix: ImportanceMatrix, threads: int,
                     store: TensorStore) -> dict[str, dict[str, float]]:
    """Every tensor's weighted rounding error at every type of its palette and at its probe type, quantized in
    process a tensor at a time; each tensor's bytes at its probe type kept in ``store``."""
    from edgeopt.exporters.gguf.tensor_data import tensor_bytes

    importance = imatrix.means()
    errors: dict[str, dict[str, float]] = {}
    originals = tensor_bytes(unquantized, [t.name for t in tensors])
    for info, data in progress(originals, "mix: rounding errors per type", total=len(tensors)):
        probe = probe_type(info.row_length)
        measured = rounding_errors(info, data, dict.fromkeys((probe, *palette(info.row_length))),
                                   importance.get(info.name), threads, whole_type=probe)
        assert measured.quantized is not None
        store.put(info.name, probe, [measured.quantized])
        errors[info.name] = measured.errors
    return errors


def _aligned(size: int, alignment: int) -> int:
    return (size + alignment - 1) // alignment * alignment
