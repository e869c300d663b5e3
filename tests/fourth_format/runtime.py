"""The fourth format's runtime: FakeRuntime over the bundle's seed, with the sizes it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fixtures.fake_runtime import FakeRuntime


def load(bundle_dir: Path, manifest: Any, *, kv_capacity_tokens: int, max_slots: int, context_length: int,
         threads: int | None = None) -> FakeRuntime:
    seed = json.loads((Path(bundle_dir) / manifest.model_file).read_text())["seed"]
    return FakeRuntime(kv_capacity_tokens=kv_capacity_tokens, max_slots=max_slots, context_length=context_length,
                       seed=seed)
