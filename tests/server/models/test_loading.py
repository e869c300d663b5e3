"""What a model needs of a shared budget, read from real files, and --models DIR scanned again on listing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.server.startup.launch_many import check_several
from edgeopt.server.startup.launcher import ServeOptions
from edgeopt.server.models.catalog import ModelCatalog
from edgeopt.server.models.loading import SEQUENCES, model_entry, scan_folder, shared_budget
from edgeopt.sizing.shape import ShapeRequest
from tests.server.models.test_many_models_live import smollm2_gguf

MIB = 2**20


def never_loaded(*args):  # noqa: ANN002, ANN201
    pytest.fail("sizing must not load the model")


def test_a_chat_models_need_is_its_shape_and_at_least_one_full_context_sequence(tmp_path: Path):
    budget = shared_budget(1 << 30, ShapeRequest(context=1024), {"gguf"})
    entry = model_entry(smollm2_gguf(), budget, never_loaded)
    need = entry.need
    weights = smollm2_gguf().stat().st_size
    assert weights < need.least_bytes < need.full_bytes < budget.bytes
    kv_per_token = (need.full_bytes - need.least_bytes) / ((SEQUENCES - 1) * 1024)
    assert 20_000 < kv_per_token < 25_000  # SmolLM2: 30 layers x 3 KV heads x 64 x 2 (K, V) x f16 = 23,040 bytes
    assert entry.refusal is None and entry.kind == "causal-lm" and entry.kv_labels["layout"] == "unified"


def test_a_model_that_cannot_fit_alone_is_listed_as_refused_with_its_bytes():
    budget = shared_budget(200 * MIB, ShapeRequest(context=1024), {"gguf"})
    entry = model_entry(smollm2_gguf(), budget, never_loaded)
    assert entry.refusal is not None and "MiB at least" in entry.refusal and "the budget for models is" in entry.refusal


def test_the_models_folder_is_scanned_again_when_models_are_listed(tmp_path: Path):
    budget = shared_budget(1 << 30, ShapeRequest(context=512), {"gguf"})
    (tmp_path / "notes.txt").write_text("not a model")
    shutil.copy2(smollm2_gguf(), tmp_path / "first.gguf")
    catalog = ModelCatalog([], scan=scan_folder(tmp_path, budget, never_loaded))
    assert [e.name for e in catalog.entries()] == ["first"]
    shutil.copy2(smollm2_gguf(), tmp_path / "second.gguf")
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 8)  # copied in halfway: left out, with a warning
    catalog.rescan()
    assert [e.name for e in catalog.entries()] == ["first", "second"]
    (tmp_path / "first.gguf").unlink()
    catalog.rescan(keep=lambda name: name == "first")  # loaded: listed until it is unloaded
    assert [e.name for e in catalog.entries()] == ["second", "first"]


def test_warm_describes_one_model_and_is_refused_with_several(tmp_path: Path):
    with pytest.raises(ConfigError, match="--warm stores one model's system prompt"):
        check_several(ServeOptions(warm_file=tmp_path / "system.txt"))
