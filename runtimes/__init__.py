"""Inference runtimes behind one small protocol (see :mod:`runtimes.base`), imported lazily by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt import backends
from runtimes.base import Runtime


def runtime_module(name: str) -> Any:
    """The backend module of runtime ``name`` (named by its entry in :mod:`edgeopt.backends`), imported now."""
    return backends.load_attr(backends.backend_for_runtime(name).runtime_module)


def load_runtime(name: str, bundle_dir: Path, manifest: Any, **options: Any) -> Runtime:
    """Import the backend module and call its ``load(bundle_dir, manifest, **options)``."""
    return runtime_module(name).load(bundle_dir, manifest, **options)
