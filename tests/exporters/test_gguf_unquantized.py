"""The unquantized GGUF an export measures and quantizes from, and that the evaluation compares with: converted
once per run into the run's workbench, F16 unless the CPU computes BF16 natively, BF16 where F16 cannot hold a
weight, never left half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeopt.exporters.gguf import unquantized
from edgeopt.exporters.gguf.unquantized import unquantized_gguf


def _bf16_copy(model_dir: Path, out: Path, big_weight: float | None = None) -> Path:
    """``model_dir`` re-saved in bf16, optionally with one weight past F16's range."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, out)
    weights = load_file(str(out / "model.safetensors"))
    weights = {name: t.to(torch.bfloat16) for name, t in weights.items()}
    if big_weight is not None:
        weights["model.layers.0.mlp.down_proj.weight"][0, 0] = big_weight
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    return out


def test_converted_once_per_run_and_found_again(tiny_llama_dir: Path, tmp_path: Path):
    first, facts = unquantized_gguf(tiny_llama_dir, tmp_path)
    again, facts_again = unquantized_gguf(tiny_llama_dir, tmp_path)
    assert first == again and first.name.endswith("-F16.gguf") and facts["n_tensors"] > 0 and facts_again == {}
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left beside it


def test_a_bf16_checkpoint_is_f16_on_a_cpu_without_bf16_and_bf16_where_f16_overflows(
        tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import gguf

    monkeypatch.setattr("edgeopt.profiles.host.cpu_flags", lambda: {"avx2", "f16c"})
    plain = _bf16_copy(tiny_llama_dir, tmp_path / "plain")
    path, _ = unquantized_gguf(plain, tmp_path / "bench")
    assert path.name.endswith("-F16.gguf")
    huge = _bf16_copy(tiny_llama_dir, tmp_path / "huge", big_weight=1e6)
    path, _ = unquantized_gguf(huge, tmp_path / "bench")
    assert path.name.endswith("-BF16.gguf") and unquantized_gguf(huge, tmp_path / "bench") == (path, {})
    down = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_down.weight")
    assert down.tensor_type == gguf.GGMLQuantizationType.BF16
    assert not list((tmp_path / "bench").glob(".*partial*"))
    monkeypatch.setattr("edgeopt.profiles.host.cpu_flags", lambda: {"avx512_bf16"})
    assert unquantized.intermediate_type(plain) == "BF16"


def test_a_gguf_optimize_evaluates_against_the_unquantized_file_not_a_float32_checkpoint(
        tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The evaluation's reference is the export's own F16 file (memory-mapped by llama.cpp, converted once):
    transformers never loads the original, and the run's workbench is gone afterwards."""
    from edgeopt.measuring import scorers
    from edgeopt.optimize.export_options import export_options
    from edgeopt.optimize.pipeline import OptimizeOptions, run_optimize
    from edgeopt.store.cache import cache_root
    from tests.fixtures.english_texts import write_texts

    def refuse(*_args, **_kwargs):
        raise AssertionError("the original was loaded in float32 by transformers")

    monkeypatch.setattr(scorers.HFScorer, "__init__", refuse)
    from edgeopt.exporters.gguf import writer

    conversions = []
    convert = writer.convert_checkpoint
    monkeypatch.setattr(writer, "convert_checkpoint", lambda *a, **k: conversions.append(a) or convert(*a, **k))
    calibration, evaluation = write_texts(tmp_path)
    manifest = run_optimize(OptimizeOptions(
        model=str(tiny_llama_dir), output=tmp_path / "bundle", format="gguf", quant="Q4_K_M", eval_data=evaluation,
        accept_quality_loss=True, export_options=export_options(calibration_data=calibration)), report=lambda _m: None)
    assert manifest is not None and np.isfinite(manifest.metrics["kl_divergence"])
    assert manifest.metrics["perplexity_original"] > 0
    assert len(conversions) == 1  # the evaluation found the file the export wrote
    assert not list((cache_root() / "workbench").iterdir())
