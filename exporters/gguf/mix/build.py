"""``--quant MIX``: a GGUF whose tensor types are chosen by measured sensitivity to fit a byte budget.

llama.cpp's mixes (Q4_K_M, ...) are fixed recipes: attn_v and ffn_down get more bits in some layers,
whatever the model. Here the model says where bits matter: every tensor's rounding error at every type
of its palette (exporters/gguf/mix/palette.py) is computed, each group of tensors' effect on the output
is measured as KL on the calibration text (exporters/gguf/mix/costs.py), and the types that fit the
budget at the lowest predicted KL are chosen (exporters/gguf/mix/choose.py). llama.cpp's own recipes that
fit the budget lend their types to the choice and are measured against it; one that measures lower is
written instead (exporters/gguf/mix/recipes.py). The files are the bytes llama.cpp's quantizer writes with
the types and the importance matrix, so any llama.cpp reads them.

Cost: every tensor quantized in process at its palette's types on a sample of its rows and at its probe type
whole (exporters/gguf/mix/palette.py), a dry run of each recipe near the budget, per group (22 for a
30-layer model: 7 roles x 3 bands, and the embeddings) a forward pass of the calibration chunks, and the
mix and the two largest fitting recipes scored the same way; every file is spliced from tensors quantized
once (exporters/gguf/mix/splice.py) (docs/gguf-mix.md).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.exporters.gguf.calibration import Calibration
from edgeopt.exporters.gguf.imatrix_file import ImportanceMatrix
from edgeopt.exporters.gguf.mix.choose import choose_types
from edgeopt.exporters.gguf.mix.costs import KLMeter, MixCosts, group_workers, measure_costs
from edgeopt.exporters.gguf.mix.palette import REFERENCE_TYPE, smallest_mix_bytes
from edgeopt.exporters.gguf.mix.recipes import (COMPETING_RECIPES, MEASURED_RECIPES, Recipe, candidate_recipes,
                                                decide, extra_types, fitting)
from edgeopt.exporters.gguf.mix.splice import TensorStore, quantize_into, splice
from edgeopt.exporters.gguf.quant_report import tensor_type_mix
from edgeopt.exporters.gguf.quantize import quantize_gguf, recipe_types
from edgeopt.exporters.gguf.tensor_data import tensor_infos

DEFAULT_BANDS = 3  # layer bands per tensor role whose sensitivity is measured (30 layers: 10 a band)
DEFAULT_SENSITIVITY_CHUNKS = 2  # chunks every group, the written mix and its competitors are scored on
# The llama_ftype written into the file (general.file_type, which tools display) for the type most of its
# weights got: what llama.cpp itself would guess from the tensors.
_FILE_TYPE_OF = {"IQ3_S": "IQ3_S", "IQ4_XS": "IQ4_XS", "Q3_K": "Q3_K_S", "Q4_K": "Q4_K_S", "Q5_K": "Q5_K_S",
                 "Q6_K": "Q6_K", "Q8_0": "Q8_0", "IQ4_NL": "IQ4_NL", "Q4_0": "Q4_0", "Q4_1": "Q4_1",
                 "Q5_0": "Q5_0", "Q5_1": "Q5_1"}


def export_mix(model_dir: Path, unquantized: Path, dst: Path, calibration: Calibration,
               options: dict[str, Any]) -> dict[str, Any]:
    """The exporter's ``--quant MIX``: sensitivity measured on the calibration's first chunks, budget
    ``options['mix_size_bytes']`` (default: the size of llama.cpp's Q4_K_M file of the model, to the byte)."""
    from edgeopt.sources.model_spec import load_model_spec
    from edgeopt.exporters.gguf.quant_types import MIX_DEFAULT_SIZE_OF, estimate_gguf_bytes

    spec = load_model_spec(str(model_dir))
    given = options.get("mix_size_bytes")
    budget = int(given or estimate_gguf_bytes(spec, MIX_DEFAULT_SIZE_OF))  # the planner's, for the checks before
    smallest = smallest_mix_bytes(spec)
    if budget < smallest:  # refused before minutes of measuring; choose_types has the exact check
        raise ConfigError(f"--size {budget / 2**20:.1f}MiB is below the smallest mix of {spec.source}, about "
                          f"{smallest / 2**20:.1f} MiB with every tensor at its smallest type",
                          f"give a --size of at least {smallest / 2**20 * 1.01 + 1:.0f}MiB, or prune the model (--prune)")
    recipes = candidate_recipes({name: estimate_gguf_bytes(spec, name) for name in COMPETING_RECIPES}, budget)
    return make_mix(unquantized, dst, int(given) if given else None, calibration.matrix,
                    calibration.chunks[:DEFAULT_SENSITIVITY_CHUNKS], spec.num_layers,
                    threads=int(options.get("threads", 2)), recipes=recipes)


def make_mix(unquantized: Path, dst: Path, budget_bytes: int | None, imatrix: ImportanceMatrix,
             token_chunks: list[list[int]], n_layers: int, threads: int = 2, bands: int = DEFAULT_BANDS,
             recipes: list[str] | tuple[str, ...] = COMPETING_RECIPES) -> dict[str, Any]:
    """Write ``dst`` (at most ``budget_bytes``; None: the size of llama.cpp's Q4_K_M file of it, from its quantizer's
    dry run) from the unquantized GGUF; return facts for the manifest. ``recipes``: llama.cpp's types the mix
    learns from and is measured against where they fit."""
    from edgeopt.exporters.gguf.quant_types import MIX_DEFAULT_SIZE_OF

    work = dst.parent / ".edgeopt-mix"
    work.mkdir(parents=True, exist_ok=True)
    try:
        maker = MixMaker(unquantized, work, imatrix, token_chunks, n_layers, threads, bands)
        if budget_bytes is None:  # "at Q4_K_M's size": the file's, not the planner's estimate (0.1-0.4% off)
            budget_bytes = maker.recipes([MIX_DEFAULT_SIZE_OF])[0].bytes
        return maker.write(dst, budget_bytes, list(recipes))
    finally:
        shutil.rmtree(work, ignore_errors=True)


class MixMaker:
    """Measures a model's costs once, then writes a mix for any budget (a curve of sizes reuses the
    measurements and the recipes' files, kept in ``work``)."""

    def __init__(self, unquantized: Path, work: Path, imatrix: ImportanceMatrix, token_chunks: list[list[int]],
                 n_layers: int, threads: int = 2, bands: int = DEFAULT_BANDS, costs: MixCosts | None = None) -> None:
        """``costs``: measured before for the same file, matrix and chunks (a benchmark's cache), else measured."""
        self.unquantized, self.work, self.imatrix, self.threads, self.bands = unquantized, work, imatrix, threads, bands
        self.sensitivity_tokens = sum(len(c) for c in token_chunks)
        self.meter = KLMeter(unquantized, token_chunks, threads)
        # every file measured or written is this one with some tensors' bytes from the store (splice.py)
        self.reference = work / "reference.gguf"
        quantize_gguf(unquantized, self.reference, REFERENCE_TYPE, threads, imatrix, types={})
        self._reference_types = {name: info.type_name for name, info in tensor_infos(self.reference).items()}
        self.store = TensorStore(work / "tensors.bin")
        self.costs: MixCosts = costs or measure_costs(unquantized, self.reference, self.store, imatrix, self.meter,
                                                      n_layers, bands, threads)
        self._importance = imatrix.means()
        self._recipes: dict[str, Recipe] = {}
        self._recipe_types: dict[str, dict[str, str]] = {}
        self._recipe_kl: dict[str, float] = {}

    def recipes(self, names: list[str]) -> list[Recipe]:
        """llama.cpp's recipes of ``names``: the types each gives each tensor (a dry run), their file's size, and
        the errors of those types measured where the palette lacked them."""
        for name in names:
            if name not in self._recipes:
                types = recipe_types(self.unquantized, name, self.threads, self.imatrix)
                quantized = {tensor: ttype for tensor, ttype in types.items() if tensor in self.costs.errors}
                self.costs.add_errors(self.unquantized, quantized, self._importance, self.threads)
                self._recipes[name] = Recipe(name, self.costs.file_bytes(quantized), quantized)
                self._recipe_types[name] = types  # every tensor's, for its file
        return [self._recipes[n] for n in names]

    def recipe_file(self, recipe: Recipe) -> Path:
        """The recipe's file, once (kept in ``work``: a curve of budgets measures it again)."""
        path = self.work / f"recipe-{recipe.name}.gguf"
        if not path.is_file():
            self._spliced(self._recipe_types[recipe.name], recipe.name, path)
        return path

    def _spliced(self, types: dict[str, str], file_type: str, dst: Path) -> None:
        """``dst`` as llama.cpp's quantizer writes it with ``types`` (the same bytes), each (tensor, type) quantized
        once for every file made here."""
        changed = {name: ttype for name, ttype in types.items() if ttype != self._reference_types.get(name)}
        quantize_into(self.store, self.unquantized, changed, self._importance, self.threads,
                      f"mix: quantizing the tensors {file_type} adds")
        splice(self.reference, changed, self.store, dst, file_type)

    def _scored(self, files: dict[str, Path]) -> dict[str, float]:
        """Each file's KL on the calibration chunks, two files at a time as the groups are (costs.group_workers)."""
        workers = group_workers(self.threads)
        with ThreadPoolExecutor(workers) as pool:
            return dict(zip(files, pool.map(lambda path: self.meter.kl(path, max(1, self.threads // workers)),
                                            files.values())))

    def write(self, dst: Path, budget_bytes: int, recipe_names: list[str]) -> dict[str, Any]:
        """The mix of ``budget_bytes`` into ``dst``, or the fitting recipe that measures lower; facts."""
        fit = fitting(self.recipes(recipe_names), budget_bytes)
        choice = choose_types(self.costs.options(extra_types(fit)), budget_bytes - self.costs.overhead)
        by_type: Counter[str] = Counter()
        for t in self.costs.tensors:
            by_type[choice.types[t.name]] += t.weights
        file_type = _FILE_TYPE_OF[by_type.most_common(1)[0][0]]
        started = time.perf_counter()
        self._spliced(choice.types, file_type, dst)
        facts = {"quantize_seconds": round(time.perf_counter() - started, 3), "tensor_types": tensor_type_mix(dst),
                 "quantize_fallbacks": []}  # every type chosen fits its tensor's rows: none falls back
        measured = [r.name for r in fit[:MEASURED_RECIPES]]
        kl = self._scored({"mix": dst} | {r.name: self.recipe_file(r) for r in fit[:MEASURED_RECIPES]
                                          if r.name not in self._recipe_kl})
        self._recipe_kl |= {name: value for name, value in kl.items() if name != "mix"}
        mix_kl, recipe_kl = kl["mix"], {name: self._recipe_kl[name] for name in measured}
        verdict = decide(mix_kl, recipe_kl)
        types = choice.types
        if verdict.written != "mix":  # llama.cpp's own type measured lower: write it, as llama-quantize would
            facts = quantize_gguf(self.unquantized, dst, verdict.written, self.threads, self.imatrix)
            types = self._recipes[verdict.written].types
        facts["mix"] = {"budget_bytes": budget_bytes, "file_type": file_type if verdict.written == "mix" else verdict.written,
                        "written": verdict.written, "reason": verdict.reason,
                        "predicted_kl": float(f"{self.costs.error_free_kl + choice.cost:.6g}"),
                        "measured_kl": float(f"{mix_kl:.6g}"),
                        "recipe_kl": {name: float(f"{kl:.6g}") for name, kl in recipe_kl.items()},
                        "bands": self.bands, "sensitivity_tokens": self.sensitivity_tokens,
                        "group_kl": self.costs.group_kl, "types": dict(sorted(types.items()))}
        if verdict.written != "mix":  # what the mix measured was made of, beside the file written instead
            facts["mix"]["mix_types"] = dict(sorted(choice.types.items()))
        return facts
