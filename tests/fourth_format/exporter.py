"""The fourth format's exporter: the model file is a seed (derived from the checkpoint's config) for
FakeRuntime, which keeps the test independent of any inference library."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from edgeopt.exporters import Exporter, ExportResult

MODEL_FILE = "model.json"


class FakeNpzExporter(Exporter):
    format = "npz-fake"

    def export(self, model_dir: Path, out_dir: Path, quant: str, options: dict[str, Any]) -> ExportResult:
        config = (Path(model_dir) / "config.json").read_bytes()
        seed = int.from_bytes(hashlib.sha256(config).digest()[:4], "little") ^ int(options.get("seed_salt", 0))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / MODEL_FILE).write_text(json.dumps({"seed": seed, "quant": quant}))
        return ExportResult(model_file=MODEL_FILE, quant=quant, runtime=self.runtime, details={"seed": seed})
