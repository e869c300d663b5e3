"""What a caller asks :func:`edgeopt.planning.plan_for` for, one typed request per command:

    PlanRequest      edgeopt plan's flags: the plan of a checkpoint, bundle, GGUF file, pair or split
    OptimizeRequest  edgeopt optimize's: the format, quant, KV type and pass list a bundle is written with
    ServeRequest     edgeopt serve's: the serving shape a bundle is started with (beside a draft, or split)

Sizes stay as the user typed them where the plan's own messages quote them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeopt.byte_sizes import Size
from edgeopt.profiles.workstation import Workstation
from edgeopt.sizing.shape import ShapeRequest


@dataclass(frozen=True)
class PlanRequest:
    context: int | None = None
    concurrency: int | None = None  # None: 1 for a checkpoint or GGUF file; a bundle: what serve would admit
    memory_bytes: int | None = None  # --memory, read already; None: the target's pool
    kv_type: str | None = None  # --kv-type as typed
    size: str | None = None  # --size as typed: also size a GGUF mix made to it (checkpoints)
    prefix_cache_memory: str | None = None  # --prefix-cache-memory as typed (bundles)


@dataclass(frozen=True)
class Compression:
    """optimize's prune and distil flags as given; planning turns them into the pass list (edgeopt.planning.pass_list,
    with --fit's prune: edgeopt.planning.fit; a draft's recipe: edgeopt.planning.draft_recipe)."""

    prune: float | None = None
    prune_heads: float | None = None
    prune_mlp: float | None = None
    prune_layers: int | None = None
    distil: bool | None = None
    distil_data: Path | None = None
    distil_steps: int = 200


@dataclass(frozen=True)
class WorkshopRequest:
    """What the optimize's own plan (edgeopt.planning.workshop) needs beyond the model and the bundle: the steps the
    flags ask for and the workstation they run on (measured by the caller: planning measures nothing)."""

    workstation: Workstation
    evaluate: bool = True
    calibration_text_bytes: int | None = None  # --calibration-data's size; None: not given
    self_calibration: bool = True  # without --calibration-data: the model writes its own text (--no-self-calibration)
    int4_calibration: bool = True  # ONNX INT4 measures activations on calibration text first (not --int4-algorithm rtn)


@dataclass(frozen=True)
class OptimizeRequest:
    format: str | None = None  # None: the profile's (encoders: the first format that embeds; a draft: gguf)
    quant: str | None = None  # any case; None: the planner's pick
    kv_type: str | None = None  # as typed; None: the planner's rule
    context: int | None = None
    concurrency: int = 1
    compression: Compression = field(default_factory=Compression)
    fit: bool = False  # prune just enough to fit the target when the model does not
    draft: bool = False  # optimize --draft-for: the model is the target the draft is made of
    size: Size | None = None  # --size: a mix made to this file size
    ignore_fit: bool = False  # plan a candidate marked as not fitting without refusing it
    dry_run: bool = False  # only show the plan: nothing unfit is refused
    output: Path | None = None  # the bundle directory; None: named for the model, target and quant
    workshop: WorkshopRequest | None = None  # plan the optimize's own steps on this workstation; None: not planned


@dataclass(frozen=True)
class ServeRequest:
    shape: ShapeRequest = field(default_factory=ShapeRequest)
    memory_bytes: int | None = None  # --memory; None: the target's pool
    draft_tokens: int | None = None  # with a BesideDraft source: tokens the draft proposes a step
    refuse: bool = True  # as serve: refuse a pool that holds no KV (False: report it, as a plan or a catalog does)
