"""``edgeopt serve BUNDLE --draft DRAFT``: the draft model's plan (edgeopt.planning: its memory taken from the budget
first) and its runtime, checked against the target's vocabulary before the engine starts."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from edgeopt.store.bundle import Manifest
from edgeopt.engine.speculation.draft_model import DraftModel
from edgeopt.engine.speculation.draft_vocab import check_same_vocabulary
from edgeopt.sources.model_source import open_model_source
from edgeopt.runtimes.base import Runtime
from edgeopt.planning import BesideDraft, BundleSource, ServeRequest, plan_for
from edgeopt.sizing.draft import DraftPlan
from edgeopt.sizing.shape import ServingShape, ShapeRequest

log = logging.getLogger("edgeopt.server")


@dataclass(frozen=True)
class DraftSetup:
    path: Path  # as given on the command line
    bundle_dir: Path
    manifest: Manifest
    plan: DraftPlan
    draft_tokens: int


def plan_with_draft(bundle_dir: Path, manifest: Manifest, request: ShapeRequest, draft: Path, draft_tokens: int,
                    memory_bytes: int | None, target: str, verify: bool) -> tuple[ServingShape, DraftSetup]:
    """The target's serving shape beside the draft, and what the draft is loaded with (its checksums verified
    when it is a bundle and ``verify``)."""
    source = open_model_source(draft, verify=verify)
    if source.manifest.kind != "causal-lm":
        from edgeopt.errors import ConfigError

        raise ConfigError(f"--draft {draft} is a {source.manifest.kind} model", "pass a causal LM (GGUF) as the draft")
    planned = plan_for(BesideDraft(BundleSource(bundle_dir, manifest), BundleSource(source.bundle_dir, source.manifest)),
                       target, ServeRequest(request, memory_bytes, draft_tokens))
    assert planned.shape is not None and planned.draft is not None  # a causal LM beside a draft: both planned
    log.info("%s", planned.draft.describe())
    return planned.shape, DraftSetup(Path(draft), source.bundle_dir, source.manifest, planned.draft, draft_tokens)


def load_draft(setup: DraftSetup, target: Runtime, target_file: Path | None, threads: int | None) -> DraftModel:
    """The draft runtime in its planned shape, refused unless its vocabulary is the target's (whose model file is
    ``target_file``: named in errors, and its size against the draft's is the draft's cost until timed)."""
    from edgeopt.runtimes import load_runtime

    runtime = load_runtime(setup.manifest.runtime, setup.bundle_dir, setup.manifest, threads=threads,
                           **setup.plan.runtime_options())
    try:
        check_same_vocabulary(target, runtime, str(target_file), str(setup.path))
    except BaseException:
        runtime.close()
        raise
    target_bytes = target_file.stat().st_size if target_file is not None and target_file.is_file() else 0
    relative = setup.plan.weights_bytes / target_bytes if target_bytes else 1.0
    return DraftModel(runtime, setup.draft_tokens, name=str(setup.path), relative_cost=min(max(relative, 0.01), 10.0))
