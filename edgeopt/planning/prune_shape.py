"""Pruning arithmetic on a ModelSpec alone (no torch): which widths and depth a prune request yields.

Structured pruning keeps every layer the same width so the result is a standard config: one
``intermediate_size``, one ``num_attention_heads`` / ``num_key_value_heads`` for all layers, fewer
``num_hidden_layers``. ``head_dim`` never changes (RoPE and the kernels depend on it).

Grouped-query attention: with G query heads per KV head we remove query heads *inside* every group
(each group keeps the same count, so the grouping stays uniform); with plain multi-head attention
(G == 1) every head is its own group and whole heads go. The KV heads of GQA models are kept: they
are few, shared, and cheap in parameters.

A ``--prune RATIO`` request removes RATIO of the non-embedding parameters. Default split (Minitron
found width pruning recovers better than depth): about a quarter of the ratio is taken as whole
layers (rounded down, so shallow models keep all their layers), half the ratio as attention heads
(rounded to what the grouping allows), and the MLP width absorbs the rest exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from edgeopt.errors import ConfigError, PassError
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.planning.prune_limits import check_request, fixed_heads_reason, fixed_layers_reason

MAX_RATIO = 0.9
DEPTH_SHARE = 0.25  # of the ratio, as a fraction of layers removed
HEAD_SHARE = 0.5  # of the ratio, as a fraction of attention heads removed


@dataclass(frozen=True)
class PruneShape:
    """The architecture after pruning: uniform per-layer widths and a depth."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int


@dataclass(frozen=True)
class PruneRequest:
    """What the user asked for; None means "choose for me" (with a ratio) or "leave alone" (without)."""

    ratio: float | None = None  # fraction of non-embedding parameters to remove
    heads: float | None = None  # fraction of attention heads to remove
    mlp: float | None = None  # fraction of MLP intermediate channels to remove
    layers: int | None = None  # whole transformer layers to remove

    def validate(self) -> None:
        for name, value in (("--prune", self.ratio), ("--prune-heads", self.heads), ("--prune-mlp", self.mlp)):
            if value is not None and not 0.0 <= value <= MAX_RATIO:
                raise ConfigError(f"{name} {value} is outside [0, {MAX_RATIO}]",
                                  f"pass a fraction such as 0.25 (at most {MAX_RATIO})")
        if self.layers is not None and self.layers < 0:
            raise ConfigError(f"--prune-layers {self.layers} is negative", "pass how many layers to remove, e.g. 2")
        if self.ratio is not None and None not in (self.heads, self.mlp, self.layers):
            raise ConfigError(f"--prune {self.ratio} together with all of --prune-heads/--prune-mlp/--prune-layers "
                              "over-determines the shape", "drop --prune or one of the three knobs")


def shape_of(spec: ModelSpec) -> PruneShape:
    return PruneShape(spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.intermediate_size)


def apply_shape(spec: ModelSpec, shape: PruneShape) -> ModelSpec:
    return dataclasses.replace(spec, num_layers=shape.num_layers, num_heads=shape.num_heads,
                               num_kv_heads=shape.num_kv_heads, intermediate_size=shape.intermediate_size)


def mlp_alignment(intermediate_size: int) -> int:
    """Granularity of the pruned MLP width: multiples that quantized kernels handle well.

    K-quants pack 256 values per block along a row and Q4_0/Q8_0 32, so a width that keeps those
    multiples quantizes every tensor at the requested type instead of a fallback.
    """
    for step, minimum in ((256, 2048), (64, 256), (32, 32), (8, 8)):
        if intermediate_size % step == 0 and intermediate_size >= minimum:
            return step
    return 1


def feasible_head_counts(spec: ModelSpec) -> list[int]:
    """Query-head counts reachable by uniform pruning, largest first (see the module docstring)."""
    group = spec.num_heads // spec.num_kv_heads
    if group > 1:
        return [spec.num_kv_heads * g for g in range(group, 0, -1)]
    return list(range(spec.num_heads, 0, -1))


def kv_heads_for(spec: ModelSpec, num_heads: int) -> int:
    return spec.num_kv_heads if spec.num_heads // spec.num_kv_heads > 1 else num_heads


def nearest_heads(spec: ModelSpec, remove_fraction: float) -> int:
    wanted = spec.num_heads * (1.0 - remove_fraction)
    return min(feasible_head_counts(spec), key=lambda n: (abs(n - wanted), -n))


def nearest_mlp(spec: ModelSpec, remove_fraction: float) -> int:
    step = mlp_alignment(spec.intermediate_size)
    kept = round(spec.intermediate_size * (1.0 - remove_fraction) / step) * step
    return max(step, min(spec.intermediate_size, kept))


def solve_shape(spec: ModelSpec, request: PruneRequest) -> PruneShape:
    """The pruned shape for ``request``; with a ratio, the free dimensions are solved to hit it."""
    request.validate()
    check_request(spec, request.heads, request.layers)
    if request.ratio is None:
        heads = nearest_heads(spec, request.heads or 0.0)
        layers = spec.num_layers - (request.layers or 0)
        _check_layers(spec, layers)
        return PruneShape(layers, heads, kv_heads_for(spec, heads), nearest_mlp(spec, request.mlp or 0.0))
    target = (1.0 - request.ratio) * spec.num_non_embedding_parameters
    drop = request.layers if request.layers is not None else int(spec.num_layers * request.ratio * DEPTH_SHARE)
    heads_frac = request.heads if request.heads is not None else request.ratio * HEAD_SHARE
    if fixed_heads_reason(spec):  # the architecture fixes them: the other dimensions take the ratio
        heads_frac = 0.0
    if fixed_layers_reason(spec):
        drop = 0
    while True:
        layers = spec.num_layers - drop
        _check_layers(spec, layers)
        heads = nearest_heads(spec, heads_frac)
        if request.mlp is not None:
            base = PruneShape(layers, heads, kv_heads_for(spec, heads), nearest_mlp(spec, request.mlp))
            heads_fixed = request.heads is not None or fixed_heads_reason(spec) is not None
            return _solve_discrete(spec, base, target, free="layers" if heads_fixed else "heads")
        shape = _solve_mlp(spec, PruneShape(layers, heads, kv_heads_for(spec, heads), 0), target)
        if shape is not None:
            return shape
        if request.layers is not None or fixed_layers_reason(spec):
            raise PassError(f"--prune {request.ratio} cannot be reached with {layers} layers and {heads} heads "
                            "without shrinking the MLP below one block",
                            "lower --prune, or allow more head/layer pruning")
        drop += 1  # the MLP alone cannot absorb the rest: take one more layer and try again


def _check_layers(spec: ModelSpec, layers: int) -> None:
    if layers < 1:
        raise PassError(f"pruning would leave {layers} of {spec.num_layers} layers",
                        "remove fewer layers (--prune-layers) or lower --prune")


def _solve_mlp(spec: ModelSpec, base: PruneShape, target: float) -> PruneShape | None:
    """The MLP width that makes the non-embedding parameter count closest to ``target``."""
    zero = apply_shape(spec, base).num_non_embedding_parameters  # base has intermediate_size == 0
    per_channel = 3 * spec.hidden_size * base.num_layers  # gate row + up row + down column per layer
    step = mlp_alignment(spec.intermediate_size)
    width = round((target - zero) / per_channel / step) * step
    if width < step:
        return None
    return dataclasses.replace(base, intermediate_size=min(width, spec.intermediate_size))


def _solve_discrete(spec: ModelSpec, base: PruneShape, target: float, free: str) -> PruneShape:
    """MLP width fixed by the user: pick the heads (or depth) whose parameter count is closest to ``target``."""
    if free == "heads":
        options = [dataclasses.replace(base, num_heads=h, num_kv_heads=kv_heads_for(spec, h))
                   for h in feasible_head_counts(spec)]
    elif fixed_layers_reason(spec):
        return base
    else:
        options = [dataclasses.replace(base, num_layers=n) for n in range(spec.num_layers, 0, -1)]
    return min(options, key=lambda s: abs(apply_shape(spec, s).num_non_embedding_parameters - target))


def pruned_spec(spec: ModelSpec, request: PruneRequest) -> ModelSpec:
    return apply_shape(spec, solve_shape(spec, request))
