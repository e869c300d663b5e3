"""Inference runtimes behind one small protocol (see :mod:`runtimes.base`), imported lazily by name."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from edgeopt.errors import ConfigError
from runtimes.base import Runtime

RUNTIME_MODULES = {
    "llama_cpp": "runtimes.llama_cpp",
    "onnxruntime": "runtimes.onnxruntime",
    "torch": "runtimes.torch",
}


def load_runtime(name: str, bundle_dir: Path, manifest: Any, **options: Any) -> Runtime:
    """Import the backend module and call its ``load(bundle_dir, manifest, **options)``."""
    if name not in RUNTIME_MODULES:
        raise ConfigError(f"unknown runtime {name!r}", f"valid runtimes: {', '.join(RUNTIME_MODULES)}")
    module = importlib.import_module(RUNTIME_MODULES[name])
    return module.load(bundle_dir, manifest, **options)
