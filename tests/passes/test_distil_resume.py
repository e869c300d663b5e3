"""A distillation killed after a checkpoint resumes from it and ends where an uninterrupted run ends;
the same loop runs under ``accelerate launch`` with two CPU processes (DDP over gloo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from edgeopt.passes.checkpointing import latest_checkpoint

STEPS = 60


def _argv(student: Path, teacher: Path, data: Path, out: Path, work: Path, **extra) -> list[str]:
    args = {"student": student, "teacher": teacher, "data": data, "output": out, "work_dir": work,
            "steps": STEPS, "seq_len": 32, "batch_size": 4, "checkpoint_every": 5, "threads": 1,
            "holdout_tokens": 1024, **extra}
    return [a for k, v in args.items() for a in (f"--{k.replace('_', '-')}", str(v))] + ["--no-progress"]


def _train_cmd(*args, **extra) -> list[str]:
    return [sys.executable, "-m", "edgeopt.passes.distil_train", *_argv(*args, **extra)]


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def test_killed_run_resumes_from_its_checkpoint(tiny_model_factory, corpus_file, tmp_path) -> None:
    teacher = tiny_model_factory("llama-gqa")
    student = tiny_model_factory("llama-tied")  # any student with the teacher's vocabulary will do
    work, out = tmp_path / "work", tmp_path / "out"
    proc = subprocess.Popen(_train_cmd(student, teacher, corpus_file, out, work), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while latest_checkpoint(work) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    found = latest_checkpoint(work)
    assert found is not None and found[0] < STEPS, "the run must be killed after a checkpoint and before the end"
    assert not (out / "model.safetensors").exists()

    resumed = subprocess.run(_train_cmd(student, teacher, corpus_file, out, work), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed from step {found[0]} " in resumed.stderr

    straight = subprocess.run(_train_cmd(student, teacher, corpus_file, tmp_path / "straight", tmp_path / "w2"),
                              capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr[-2000:]
    a, b = _weights(out), _weights(tmp_path / "straight")
    for name in b:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4)


def test_two_process_ddp_matches_one_process(tiny_model_factory, corpus_file, tmp_path) -> None:
    teacher = tiny_model_factory("llama-gqa")
    student = tiny_model_factory("llama-tied")
    common = dict(steps=6, checkpoint_every=0)
    # --multi_gpu selects accelerate's torch.distributed launcher; on a machine without GPUs the
    # training code asks for cpu=True and accelerate runs DDP over gloo (DistributedType.MULTI_CPU).
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "-m", "edgeopt.passes.distil_train",
              *_argv(student, teacher, corpus_file, tmp_path / "ddp", tmp_path / "w-ddp", **common, batch_size=2)]
    ddp = subprocess.run(launch, capture_output=True, text=True, timeout=300)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert '"processes": 2' in ddp.stdout
    single = subprocess.run(_train_cmd(student, teacher, corpus_file, tmp_path / "one", tmp_path / "w-one",
                                       **common, batch_size=4), capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-2000:]
    # Same global batch (2 x 2 vs 1 x 4), same rows in the same order: DDP's averaged gradient equals the
    # single process's, so the weights agree up to float summation order.
    a, b = _weights(tmp_path / "ddp"), _weights(tmp_path / "one")
    for name in b:
        torch.testing.assert_close(a[name], b[name], atol=1e-4, rtol=1e-3)
