"""Distillation: the loss, the schedule, the batches, and a pass that actually recovers quality."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgeopt.errors import PassError
from edgeopt.passes import PassContext
from edgeopt.passes.distil import DistilPass
from edgeopt.passes.distil_data import batch_indices
from edgeopt.passes.distil_train import DistilConfig, distillation_loss, lr_at
from edgeopt.passes.prune import PrunePass


def test_loss_is_zero_only_when_student_matches_teacher() -> None:
    torch.manual_seed(0)
    teacher = torch.randn(2, 5, 11)
    targets = torch.randint(0, 11, (2, 5))
    assert distillation_loss(teacher.clone(), teacher, targets, 2.0, 0.0).item() == pytest.approx(0.0, abs=1e-6)
    assert distillation_loss(torch.randn(2, 5, 11), teacher, targets, 2.0, 0.0).item() > 0.01
    with_ce = distillation_loss(teacher.clone(), teacher, targets, 1.0, 0.5).item()
    assert with_ce > 0.1  # the data term stays even when the KL term vanishes


def test_schedule_warms_up_then_decays_to_the_floor() -> None:
    cfg = DistilConfig("s", "t", "d", "o", "w", steps=100, lr=1e-3, warmup_ratio=0.1, min_lr_ratio=0.1)
    lrs = [lr_at(cfg, s) for s in range(100)]
    assert lrs[0] < lrs[5] < lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(1e-4, rel=0.05)


def test_batches_are_a_function_of_step_and_cover_each_epoch() -> None:
    first_epoch = [i for step in range(5) for i in batch_indices(20, 4, step, seed=3)]
    assert sorted(first_epoch) == list(range(20))
    assert batch_indices(20, 4, 7, seed=3) == batch_indices(20, 4, 7, seed=3)
    assert batch_indices(20, 4, 7, seed=3) != batch_indices(20, 4, 7, seed=4)


def test_distil_pass_recovers_kl_after_pruning(tiny_model_factory, corpus_file, tmp_path) -> None:
    original = tiny_model_factory("llama-gqa")
    ctx = PassContext(original_model_dir=original, target="host", work_dir=tmp_path / "work")
    (tmp_path / "pruned").mkdir()
    PrunePass(ratio=0.4, calib_data=str(corpus_file), eval_tokens=1024).run(original, tmp_path / "pruned", ctx)
    (tmp_path / "out").mkdir()
    metrics = DistilPass(data=str(corpus_file), steps=60, seq_len=64, batch_size=4, lr=3e-3, checkpoint_every=10,
                         eval_tokens=2048, progress=False, threads=1).run(tmp_path / "pruned", tmp_path / "out", ctx)
    assert metrics["kl_to_original"] < 0.85 * metrics["before_kl_to_original"]
    assert metrics["perplexity"] < metrics["before_perplexity"]
    assert metrics["tokens_seen"] == 60 * 4 * 64 and metrics["tokens_per_s"] > 0
    assert not (tmp_path / "work").exists()  # checkpoints are dropped once the output exists


def test_distil_without_data_is_refused(tiny_llama_dir, tmp_path) -> None:
    ctx = PassContext(original_model_dir=tiny_llama_dir, target="host")
    with pytest.raises(PassError, match="--distil-data"):
        DistilPass(steps=2).run(tiny_llama_dir, tmp_path, ctx)
