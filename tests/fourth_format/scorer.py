"""The fourth format's scorer: next-token logits of every prefix, from the format's runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.runtimes.base import StepInput
from tests.fourth_format.runtime import load


class FakeScorer:
    def __init__(self, bundle_dir: Path, manifest: Any, context: int) -> None:
        self._runtime = load(bundle_dir, manifest, kv_capacity_tokens=context, max_slots=1, context_length=context)
        self.vocab_size = self._runtime.info.vocab_size

    def score(self, token_ids: list[int]) -> np.ndarray:
        rows = [self._runtime.step([StepInput(0, [token], position, True)])[0]
                for position, token in enumerate(token_ids)]
        self._runtime.release(0)
        return np.stack(rows).astype(np.float32)

    def close(self) -> None:
        self._runtime.close()


def load_scorer(bundle_dir: Path, manifest: Any, context: int, threads: int = 2) -> FakeScorer:
    return FakeScorer(Path(bundle_dir), manifest, context)
