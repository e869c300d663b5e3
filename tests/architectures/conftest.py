"""Session fixtures of the architecture matrix: each checkpoint and each export is built once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.architectures.catalog import build_architecture, by_name


@pytest.fixture(scope="session")
def arch_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Callable[[str], Path]:
    """``arch_dir(name) -> Path`` of the tiny HF checkpoint of that catalog entry."""
    built: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in built:
            built[name] = build_architecture(by_name(name), tmp_path_factory.mktemp(f"hf-{name}"), tiny_tokenizer_dir)
        return built[name]

    return make


@pytest.fixture(scope="session")
def arch_gguf(tmp_path_factory: pytest.TempPathFactory, arch_dir) -> Callable[[str, str], Path]:
    """``arch_gguf(name, quant) -> Path`` of model.gguf written by edgeopt's exporter."""
    from edgeopt.exporters.gguf.exporter import GGUFExporter

    built: dict[tuple[str, str], Path] = {}

    def make(name: str, quant: str) -> Path:
        if (name, quant) not in built:
            out = tmp_path_factory.mktemp(f"gguf-{name}-{quant.lower()}")
            result = GGUFExporter().export(arch_dir(name), out, quant, {"threads": 2})
            built[name, quant] = out / result.model_file
        return built[name, quant]

    return make


@pytest.fixture(scope="session")
def arch_bundle(tmp_path_factory: pytest.TempPathFactory, arch_dir) -> Callable[[str, str, str], Path]:
    """``arch_bundle(name, format, quant) -> Path`` of a bundle made by the real optimize pipeline
    (planner, exporter, manifest), evaluation off (``edgeopt eval`` is tested on it separately)."""
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize

    built: dict[tuple[str, str, str], Path] = {}

    def make(name: str, fmt: str, quant: str) -> Path:
        key = (name, fmt, quant)
        if key not in built:
            out = tmp_path_factory.mktemp(f"bundle-{name}-{fmt}") / f"{name}-{quant.lower()}"
            run_optimize(OptimizeOptions(model=str(arch_dir(name)), target="host", output=out, format=fmt,
                                         quant=quant, context=256, evaluate=False,
                                         export_options={"threads": 2} if fmt == "gguf" else {},
                                         force=True), report=lambda _msg: None)
            built[key] = out
        return built[key]

    return make
