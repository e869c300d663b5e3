"""The ``distil`` pass: recover a pruned model's quality by distilling from the original (the teacher).

Params: data (text file, required), data_sha256 (content key for the cache), steps, seq_len,
batch_size, grad_accum, lr, temperature, ce_weight, checkpoint_every, grad_checkpointing,
mixed_precision, processes (>1: run under ``accelerate launch`` with that many processes), eval_tokens.

Checkpoints go to ``ctx.work_dir``, which the pipeline keys like the step itself and keeps outside
the temporary output directory, so re-running the same command after a kill resumes training.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from edgeopt.errors import PassError
from edgeopt.passes import Pass, PassContext
from edgeopt.planning import HOLDOUT_TOKENS

TRAIN_KEYS = ("steps", "seq_len", "batch_size", "grad_accum", "lr", "min_lr_ratio", "warmup_ratio", "weight_decay",
              "max_grad_norm", "temperature", "kd_weight", "ce_weight", "checkpoint_every", "grad_checkpointing",
              "mixed_precision", "holdout_tokens", "seed", "threads", "progress")


class DistilPass(Pass):
    name = "distil"

    def run(self, model_dir: Path, out_dir: Path, ctx: PassContext) -> dict[str, Any]:
        from edgeopt.passes.distil_train import DistilConfig

        started = time.perf_counter()
        data = self.params.get("data")
        if not data:
            raise PassError("the distil pass needs training text and none was given",
                            "pass --distil-data FILE (plain text), or --no-distil")
        unknown = set(self.params) - set(TRAIN_KEYS) - {"data", "data_sha256", "processes", "eval_tokens"}
        if unknown:
            raise PassError(f"unknown distil parameter(s) {sorted(unknown)}", f"valid: {', '.join(TRAIN_KEYS)}")
        work_dir = ctx.work_dir or (out_dir / ".checkpoints")
        cfg = DistilConfig(student=str(model_dir), teacher=str(ctx.original_model_dir), data=str(data),
                           output=str(out_dir), work_dir=str(work_dir),
                           **{k: self.params[k] for k in TRAIN_KEYS if k in self.params})
        processes = int(self.params.get("processes", 1))
        train_metrics = launch(cfg, processes) if processes > 1 else _train_here(cfg)
        eval_tokens = int(self.params.get("eval_tokens", HOLDOUT_TOKENS))
        metrics = {**train_metrics, **evaluate(model_dir, out_dir, ctx, data, eval_tokens)}
        shutil.rmtree(work_dir, ignore_errors=True)  # the cached output supersedes the checkpoints
        metrics["seconds"] = time.perf_counter() - started
        return metrics


def _train_here(cfg: Any) -> dict[str, Any]:
    from edgeopt.passes.distil_train import train

    return train(cfg)


def launch(cfg: Any, processes: int) -> dict[str, Any]:
    """Run training under ``accelerate launch`` with ``processes`` local processes; return its metrics."""
    # --multi_gpu is accelerate's torch.distributed launcher; without GPUs the loop passes cpu=True
    # to Accelerator and training runs as DDP over gloo.
    args = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    args += ["-m", "edgeopt.passes.distil_train"] + config_to_argv(cfg)
    proc = subprocess.run(args, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise PassError(f"distillation under accelerate launch ({processes} processes) exited with {proc.returncode}",
                        "see the training log above; re-running the same command resumes from the last checkpoint")
    for line in proc.stdout.splitlines():
        if line.startswith("DISTIL_METRICS "):
            return json.loads(line[len("DISTIL_METRICS "):])
    raise PassError("distillation finished without reporting metrics", "see the training log above")


def config_to_argv(cfg: Any) -> list[str]:
    argv: list[str] = []
    for name, value in dataclasses.asdict(cfg).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv


def evaluate(student_dir: Path, distilled_dir: Path, ctx: PassContext, data: str, eval_tokens: int) -> dict[str, Any]:
    """Perplexity and KL to the original, before (the pruned input) and after distillation."""
    import torch

    from edgeopt.passes.distil_data import eval_blocks
    from edgeopt.measuring.torch_metrics import compare_models, load_causal_lm

    torch.set_num_threads(min(torch.get_num_threads(), 2))
    blocks, source = eval_blocks(student_dir, ctx.data_file, data, eval_tokens)
    teacher = load_causal_lm(ctx.original_model_dir)
    before = compare_models(teacher, load_causal_lm(student_dir), blocks, prefix="before_")
    after = compare_models(teacher, load_causal_lm(distilled_dir), blocks)
    params = sum(p.numel() for p in load_causal_lm(distilled_dir).parameters())
    return {**before, **after, "eval_data": source, "params": params}
