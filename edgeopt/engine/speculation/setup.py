"""The speculation an engine runs with: the mode asked for, against what its runtime can do."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeopt.engine.speculation.controller import SpeculationController
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import Runtime

if TYPE_CHECKING:
    from edgeopt.engine.speculation.draft_model import DraftModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Speculation:
    """What the scheduler needs to let decode steps carry drafts (and the verifier to judge them)."""

    controller: SpeculationController
    trim_slot: Callable[[int, int], None]  # the runtime's trim(): drop a slot's positions from the given one
    max_rows: int | None  # logits rows one pass can return (None: unbounded)
    splits_mixed_lengths: bool  # see RuntimeInfo.splits_mixed_lengths
    context_tokens: int  # no drafted token may sit at this position or past it


def speculation_for(runtime: Runtime, mode: str, context_tokens: int,
                    draft_model: DraftModel | None = None) -> Speculation | None:
    """Speculation when ``mode`` asks for it and the runtime can return every position's logits and drop a
    running slot's KV tail (RuntimeInfo.trims_kv); None for "off". A runtime that cannot refuses a mode asked
    for by name and runs "auto" without speculation. ``draft_model``: drafts come from it (serve --draft)."""
    info = runtime.info
    controller = SpeculationController(mode, draft_model)
    if not controller.enabled:
        return None
    if not (info.trims_kv and info.position_logits):
        if mode != "auto" or draft_model is not None:  # asked for by name: refusing beats serving without it unannounced
            raise ConfigError(f"speculative decoding {mode!r} needs a runtime that returns every position's logits "
                              f"and drops a running sequence's KV tail; {type(runtime).__name__} does not",
                              "use --speculative auto (off where unsupported) or off")
        log.info("speculative decoding is off: %s cannot drop a running sequence's KV tail", type(runtime).__name__)
        return None
    return Speculation(controller, runtime.trim, runtime.max_logit_rows, info.splits_mixed_lengths, context_tokens)
