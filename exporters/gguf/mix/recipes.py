"""llama.cpp's own types that fit a mix's budget: what the mix competes with, learns types from, and falls back to.

A mix must never be worse than the file ``llama-quantize --imatrix`` would write at the same size. Two rules
make sure of it:

1. **Every type a fitting recipe gives a tensor is among that tensor's choices.** The recipes are quantized
   with the same importance matrix, so the mix could reproduce any of them exactly. llama.cpp's quantizer says
   which type its recipe gives each tensor in a dry run (no file written); the rounding errors of the types the
   palette lacks are measured as the palette's are. Why it matters: for rows that 256 does not divide
   (SmolLM2's 576) llama.cpp's Q5_K_M falls back to Q5_1, which the palette leaves out
   (exporters/gguf/mix/palette.py); without it the mix lost 2.26x at Q5_K_M's size.
2. **Measured, not predicted, decides.** The written mix and the largest fitting recipes (the only recipes
   written to a file) are scored on the calibration chunks against the unquantized model; when a recipe
   measures lower, the recipe is written instead, and the manifest says so (``export.mix.written``).

Only llama.cpp's recommended types compete: the k-quant mixes, IQ4_XS and Q8_0. The legacy Q4_0/Q4_1/Q5_0/Q5_1
files are left out as ``llama-quantize --help`` itself advises ("legacy, prefer using Q4_K_M"); their types still
enter as the k-quants' fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPETING_RECIPES = ("Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_XS", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0")
MEASURED_RECIPES = 2  # the largest fitting recipes are scored: within one family, more bytes lose less
# Recipes whose estimated size is at most this much over the budget are dry-run to see whether they fit (the
# planner's estimate is within a few percent of the file).
_ESTIMATE_SLACK = 1.05


@dataclass(frozen=True)
class Recipe:
    name: str  # llama.cpp's file type, e.g. Q5_K_M
    bytes: int  # its file's size
    types: dict[str, str]  # tensor -> the type llama.cpp gives it


def candidate_recipes(estimates: dict[str, int], budget_bytes: int) -> list[str]:
    """The recipes worth looking at for ``budget_bytes`` given the planner's size ``estimates`` of each (one
    without an estimate is not a candidate)."""
    return [name for name in COMPETING_RECIPES
            if name in estimates and estimates[name] <= budget_bytes * _ESTIMATE_SLACK]


def fitting(recipes: list[Recipe], budget_bytes: int) -> list[Recipe]:
    """The recipes whose file fits the budget, largest first."""
    return sorted((r for r in recipes if r.bytes <= budget_bytes), key=lambda r: r.bytes, reverse=True)


def extra_types(recipes: list[Recipe]) -> dict[str, set[str]]:
    """{tensor: every type a recipe gave it}: the choices rule 1 adds to the palette."""
    found: dict[str, set[str]] = {}
    for recipe in recipes:
        for name, ttype in recipe.types.items():
            found.setdefault(name, set()).add(ttype)
    return found


@dataclass(frozen=True)
class Verdict:
    written: str  # "mix" or the recipe written instead
    reason: str


def decide(mix_kl: float, recipe_kl: dict[str, float]) -> Verdict:
    """Which file to write: the mix, unless a recipe measured strictly lower on the calibration text."""
    if recipe_kl:
        best = min(recipe_kl, key=recipe_kl.__getitem__)
        if recipe_kl[best] < mix_kl:
            return Verdict(best, f"llama.cpp's {best} measured KL {recipe_kl[best]:.4g} on the calibration text, "
                                 f"below the mix's {mix_kl:.4g}: {best} written instead")
        return Verdict("mix", f"the mix measured KL {mix_kl:.4g}, at or below llama.cpp's best fitting type "
                              f"({best}, {recipe_kl[best]:.4g})")
    return Verdict("mix", "no llama.cpp type fits this size")
