"""Fixtures for pass tests: a calibration/distillation text file from the demo corpus."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeopt.demo.corpus import stdlib_text

    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(stdlib_text(120_000))
    return path


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)  # on a loaded 2-core box, 2 threads spin-wait each other (measured 17x slower)
