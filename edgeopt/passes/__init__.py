"""Optimization passes: ``HF checkpoint dir -> HF checkpoint dir`` steps that register by name.

A pass declares its parameters; the pipeline hashes (name, parameters, input content) to cache its
output, so a pass that already ran with the same inputs is not run again. Heavy imports (torch,
transformers) belong inside ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class PassContext:
    """What a pass may need beyond its input: the original model (teacher), data, target."""

    original_model_dir: Path
    target: str
    data_file: Path | None = None
    work_dir: Path | None = None  # for checkpoints that must survive an interruption
    extra: dict[str, Any] = field(default_factory=dict)


class Pass:
    name: ClassVar[str]
    registry: ClassVar[dict[str, type[Pass]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "name", None):
            Pass.registry[cls.name] = cls

    def __init__(self, **params: Any) -> None:
        self.params = params

    def run(self, model_dir: Path, out_dir: Path, ctx: PassContext) -> dict[str, Any]:
        """Write the transformed checkpoint into ``out_dir``; return metrics for the manifest."""
        raise NotImplementedError


def get_pass(name: str, **params: Any) -> Pass:
    import importlib

    from edgeopt.errors import ConfigError

    modules = {"prune": "edgeopt.passes.prune", "distil": "edgeopt.passes.distil"}
    if name not in modules:
        raise ConfigError(f"unknown pass {name!r}", f"valid passes: {', '.join(modules)}")
    importlib.import_module(modules[name])
    return Pass.registry[name](**params)
