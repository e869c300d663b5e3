"""A server of several models keeps an unloaded GGUF's llama.cpp model (runtimes/llama_cpp/kept_models.py): the
swap back takes it instead of loading the file again (Gemma 3's vocabulary tables: 1.1 s of CPU), answers as a
fresh load does, and a kept model is freed oldest first, never the one about to load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import edgeopt.runtimes.llama_cpp as llama_runtime
from edgeopt.runtimes.base import StepInput
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.runtimes.llama_cpp.kept_models import KeptModels


def open_runtime(path: Path, kept: KeptModels | None):
    return load_gguf(path, kv_capacity_tokens=256, max_slots=1, max_batch_tokens=64, threads=1, n_gpu_layers=0,
                     kept_models=kept)


def first_row(runtime, text: str = "hello world"):
    row = runtime.step([StepInput(0, runtime.tokenizer.encode(text), 0, True)])
    runtime.release(0)
    return row


def test_a_closed_runtime_leaves_its_model_and_the_next_load_of_the_file_takes_it(tiny_gguf_factory, tmp_path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf_factory("llama-gqa", "F16"), path)
    kept = KeptModels()
    fresh = open_runtime(path, kept)
    expected = first_row(fresh)
    fresh.close()
    assert kept.held_bytes(path) == kept.held_bytes() >= 0 and kept._models  # noqa: SLF001 -- kept, not freed

    def must_not_load(*args, **kwargs):
        raise AssertionError("loaded the file again")

    monkeypatch.setattr(llama_runtime, "load_model", must_not_load)
    again = open_runtime(path, kept)
    assert not kept._models  # noqa: SLF001 -- handed over
    assert (first_row(again) == expected).all()
    again.close()
    assert kept._models  # noqa: SLF001
    assert kept.release_oldest(spare=path) == 0 and kept._models  # noqa: SLF001 -- the file about to load stays
    kept.release_oldest()
    assert not kept._models and kept.held_bytes() == 0  # noqa: SLF001


def test_without_a_keeper_close_frees_the_model(tiny_gguf_factory):
    runtime = open_runtime(tiny_gguf_factory("llama-gqa", "F16"), None)
    assert runtime.keep_model is None
    runtime.close()
