"""What ``load_gguf`` attaches to a llama.cpp runtime beyond its context: work left until the model serves, and
where the model goes when the runtime closes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgeopt.runtimes.llama_cpp.deferred_timing import DeferredTiming


class LoadHooks:
    # The attention timing of a file not timed yet (deferred_timing.py), started by after_ready
    attention_timing: DeferredTiming | None = None
    # Takes the llama.cpp model at close instead of freeing it (kept_models.py: a server of several models)
    keep_model: Callable[[Any], None] | None = None

    def after_ready(self) -> None:
        """The model serves (Runtime.after_ready): start the deferred attention timing, if any."""
        if self.attention_timing is not None:
            self.attention_timing.start()
