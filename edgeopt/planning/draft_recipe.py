"""``edgeopt optimize --draft-for TARGET``: which passes make a draft model of TARGET (no torch here).

A draft model proposes tokens its target verifies (docs/speculative_decoding.md), so it must speak the
target's vocabulary and cost a fraction of a target step. Where no small sibling exists, it is made from the
target itself: pruned, by default to a quarter of its layers (a decode step runs the layers one after the
other, so depth is what a draft's step time is made of; the embedding and output head stay, and with them the
vocabulary), then distilled from the target on the user's text. The user sets another size with the prune
knobs every optimize run has (``--prune``, ``--prune-layers``, ``--prune-heads``, ``--prune-mlp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.planning.pass_list import HOLDOUT_TOKENS, compression_passes
from edgeopt.planning.requests import Compression
from edgeopt.planning.prune_limits import fixed_layers_reason
from edgeopt.planning.prune_shape import PruneRequest, PruneShape, apply_shape, shape_of, solve_shape

KEPT_LAYERS = 0.25  # of the target's, when no --prune* is given
WIDTH_RATIO = 0.75  # --prune's default where the architecture fixes the depth (SmolLM3)
FORMAT = "gguf"  # what serve --draft loads


@dataclass(frozen=True)
class DraftRecipe:
    """The passes that make the draft, and its shape against the target's (what the command prints)."""

    passes: list[tuple[str, dict[str, Any]]]
    target: ModelSpec
    draft: ModelSpec
    knobs: str  # the prune flags in effect, as typed ("--prune-layers 22" when the default chose them)

    def describe(self) -> str:
        share = self.draft.num_parameters / self.target.num_parameters
        return (f"draft of {self.target.source}: {self.draft.num_layers} of {self.target.num_layers} layers, "
                f"{self.draft.num_heads} heads, MLP {self.draft.intermediate_size} ({self.knobs}): "
                f"{self.draft.num_parameters / 1e6:.1f}M parameters, {share:.0%} of the target's "
                f"{self.target.num_parameters / 1e6:.1f}M")


def check_draft_flags(model: str | None, target: str, fmt: str | None, fit: bool, accept_quality_loss: bool,
                      distil: bool | None, distil_data: Path | None, eval_data: Path | None) -> None:
    """Refuse what a draft cannot be made with, naming the flag and the fix."""
    if model is not None:
        raise ConfigError(f"MODEL {model} given with --draft-for {target}: the draft is made from its target",
                          f"name the target once: edgeopt optimize --draft-for {target}")
    if fmt is not None and fmt != FORMAT:
        raise ConfigError(f"--format {fmt} with --draft-for: edgeopt serve --draft loads a {FORMAT} draft",
                          f"drop --format (a draft is written as {FORMAT})")
    if fit:
        raise ConfigError("--fit with --draft-for: --fit prunes to fit a device, a draft's size is its own",
                          "drop --fit; set the draft's size with --prune-layers N or --prune RATIO")
    if accept_quality_loss:
        raise ConfigError("--accept-quality-loss with --draft-for: a draft is not held to the quality floor "
                          "(what it is measured by is how often the target accepts its tokens)",
                          "drop --accept-quality-loss")
    if distil is False:
        raise ConfigError("--no-distil with --draft-for: a draft pruned and not distilled agrees with its target "
                          "on few tokens", "drop --no-distil and pass --distil-data FILE")
    if distil_data is None:
        raise ConfigError("--draft-for needs text to distil the draft on and no --distil-data was given",
                          f"pass --distil-data FILE: plain text like what {target} will serve (its last "
                          f"{HOLDOUT_TOKENS} tokens are held out, to measure how often the target accepts the draft)")
    if eval_data is not None and Path(eval_data).resolve() == Path(distil_data).resolve():
        raise ConfigError(f"--eval-data {eval_data} is the --distil-data file: the draft was trained on it, so its "
                          "acceptance there says little about text it has not seen",
                          "drop --eval-data (the held-out tail of --distil-data is used) or pass other text")


def draft_recipe(spec: ModelSpec, flags: Compression) -> DraftRecipe:
    """The prune + distil passes for a draft of ``spec``; the default size when no prune knob is given."""
    ratio, heads, mlp, layers = flags.prune, flags.prune_heads, flags.prune_mlp, flags.prune_layers
    given = {"--prune": ratio, "--prune-heads": heads, "--prune-mlp": mlp, "--prune-layers": layers}
    if all(value is None for value in given.values()):
        ratio, layers = default_size(spec)
        given = {"--prune": ratio, "--prune-layers": layers}
    knobs = " ".join(f"{flag} {value}" for flag, value in given.items() if value is not None)
    shape = solve_shape(spec, PruneRequest(ratio, heads, mlp, layers))
    _check_smaller(spec, shape, knobs)
    passes = compression_passes(ratio, heads, mlp, layers, True, flags.distil_data, flags.distil_steps, fit=False)
    return DraftRecipe(passes, spec, apply_shape(spec, shape), knobs)


def default_size(spec: ModelSpec) -> tuple[float | None, int | None]:
    """(--prune, --prune-layers) of a draft without prune flags: keep a quarter of the layers (at least one),
    or take --prune 0.75 of the width where the architecture fixes the depth."""
    if fixed_layers_reason(spec):
        return WIDTH_RATIO, None
    kept = max(1, math.ceil(spec.num_layers * KEPT_LAYERS))
    return None, spec.num_layers - kept


def _check_smaller(spec: ModelSpec, shape: PruneShape, knobs: str) -> None:
    if shape == shape_of(spec):
        kept = max(1, math.ceil(spec.num_layers * KEPT_LAYERS))
        raise ConfigError(f"{knobs} leaves the draft as large as its target {spec.source} ({spec.num_layers} "
                          f"layers, {spec.num_heads} heads, MLP {spec.intermediate_size}): a draft must be cheaper "
                          "to run than the model it drafts for",
                          f"remove layers or width, e.g. --prune-layers {spec.num_layers - kept} (keeps {kept}, "
                          "the default without --prune*) or --prune 0.75")
