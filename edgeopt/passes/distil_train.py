"""Knowledge-distillation training loop (student <- teacher) on accelerate; also a CLI for ``accelerate launch``.

    accelerate launch --num_processes 2 -m edgeopt.passes.distil_train \
        --student pruned/ --teacher original/ --data corpus.txt --output distilled/ --work-dir ckpt/

Loss = T^2 * KL(teacher_T || student_T) on temperature-softened next-token distributions, plus
``ce_weight`` * cross-entropy on the data. AdamW; linear warmup then cosine decay to ``min_lr_ratio``.
The learning rate is set by hand from the step number rather than by a prepared scheduler: that
keeps the schedule identical for any process count and makes it part of "resume = same step".
Gradient accumulation uses ``no_sync`` so DDP all-reduces once per optimizer step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from edgeopt.passes.checkpointing import latest_checkpoint, load_checkpoint, save_checkpoint
from edgeopt.passes.distil_data import SEQ_LEN, batch_indices, split_tokens, to_blocks
from edgeopt.planning import HOLDOUT_TOKENS


@dataclass
class DistilConfig:
    student: str
    teacher: str
    data: str
    output: str
    work_dir: str
    steps: int = 200
    seq_len: int = SEQ_LEN
    batch_size: int = 8  # sequences per process per micro-batch
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_ratio: float = 0.05
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    kd_weight: float = 1.0  # 0 turns this into plain language-model training (the from-scratch baseline)
    ce_weight: float = 0.0
    checkpoint_every: int = 50
    grad_checkpointing: bool = False
    mixed_precision: str = "auto"  # auto: bf16 on GPUs that have it, else fp16 on GPU, none on CPU
    holdout_tokens: int = HOLDOUT_TOKENS
    seed: int = 0
    threads: int = 2
    progress: bool = True

    @property
    def warmup_steps(self) -> int:
        return max(1, int(self.steps * self.warmup_ratio))


def lr_at(cfg: DistilConfig, step: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


def resolve_mixed_precision(choice: str) -> str:
    if choice != "auto":
        return choice
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"  # CPU autocast to bf16 is slower than fp32 on most CPUs and noisier


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor | None, targets: torch.Tensor,
                      temperature: float, ce_weight: float, kd_weight: float = 1.0) -> torch.Tensor:
    ce = F.cross_entropy(student_logits.float().reshape(-1, student_logits.shape[-1]), targets.reshape(-1))
    if teacher_logits is None or not kd_weight:
        return ce_weight * ce
    s = student_logits.float() / temperature
    t = teacher_logits.float() / temperature
    t_logp = t.log_softmax(-1)
    kl = (t_logp.exp() * (t_logp - s.log_softmax(-1))).sum(-1).mean() * temperature**2
    return kd_weight * kl + ce_weight * ce


def _load_models(cfg: DistilConfig, accelerator: Any, precision: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    student = AutoModelForCausalLM.from_pretrained(cfg.student, dtype=torch.float32)
    student.config.use_cache = False
    if cfg.grad_checkpointing:
        student.gradient_checkpointing_enable()
    student.train()
    teacher_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(cfg.teacher, dtype=teacher_dtype).to(accelerator.device).eval()
    teacher.requires_grad_(False)
    return student, teacher


def _optimizer(cfg: DistilConfig, model: Any) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]  # norms: decaying them hurts
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def train(cfg: DistilConfig) -> dict[str, Any]:
    """Run (or resume) distillation; the student is saved to ``cfg.output``. Returns training metrics."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _train(cfg)
    finally:
        torch.set_num_threads(previous_threads)


def _train(cfg: DistilConfig) -> dict[str, Any]:
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    precision = resolve_mixed_precision(cfg.mixed_precision)
    accelerator = Accelerator(mixed_precision=precision, cpu=not torch.cuda.is_available())
    set_seed(cfg.seed)
    train_ids, _ = split_tokens(Path(cfg.student), cfg.data, cfg.holdout_tokens)
    blocks = to_blocks(train_ids, cfg.seq_len)
    student, teacher = _load_models(cfg, accelerator, precision)
    optimizer = _optimizer(cfg, student)
    student, optimizer = accelerator.prepare(student, optimizer)
    work_dir, start_step = Path(cfg.work_dir), 0
    found = latest_checkpoint(work_dir)
    if found is not None:
        start_step = int(load_checkpoint(accelerator, found[1])["step"])
        accelerator.print(f"distil: resumed from step {start_step} ({found[1]})", file=sys.stderr)
    stats = _loop(cfg, accelerator, student, teacher, optimizer, blocks, start_step)
    _save_student(cfg, accelerator, student)
    return {**stats, "resumed_from_step": start_step, "mixed_precision": precision,
            "processes": accelerator.num_processes, "train_blocks": int(blocks.shape[0])}


def _loop(cfg: DistilConfig, accelerator: Any, student: Any, teacher: Any, optimizer: Any,
          blocks: torch.Tensor, start_step: int) -> dict[str, Any]:
    from tqdm.auto import tqdm

    procs, rank = accelerator.num_processes, accelerator.process_index
    global_batch = cfg.batch_size * procs * cfg.grad_accum
    bar = tqdm(total=cfg.steps, initial=start_step, desc="distil", unit="step",
               disable=not (cfg.progress and accelerator.is_main_process), file=sys.stderr)
    started, tokens, loss_value = time.perf_counter(), 0, float("nan")
    for step in range(start_step, cfg.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, step)
        indices = batch_indices(blocks.shape[0], global_batch, step, cfg.seed)
        step_loss = 0.0
        for micro in range(cfg.grad_accum):
            lo = (micro * procs + rank) * cfg.batch_size
            ids = blocks[indices[lo:lo + cfg.batch_size]].to(accelerator.device)
            step_loss += _micro_step(cfg, accelerator, student, teacher, ids, last=micro == cfg.grad_accum - 1)
        if cfg.max_grad_norm:
            accelerator.clip_grad_norm_(student.parameters(), cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += global_batch * cfg.seq_len
        loss_value = step_loss
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.4f}", tok_s=f"{tokens / (time.perf_counter() - started):.0f}")
        done = step + 1
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            save_checkpoint(accelerator, Path(cfg.work_dir), done, {"loss": loss_value})
    bar.close()
    seconds = time.perf_counter() - started
    return {"steps": cfg.steps, "tokens_seen": tokens, "train_seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds else 0.0, "final_loss": loss_value}


def _micro_step(cfg: DistilConfig, accelerator: Any, student: Any, teacher: Any, ids: torch.Tensor,
                last: bool) -> float:
    import contextlib

    teacher_logits = None
    if cfg.kd_weight:
        with torch.no_grad():
            teacher_logits = teacher(input_ids=ids, use_cache=False).logits[:, :-1]
    # Only the last micro-batch of an optimizer step all-reduces gradients across processes.
    sync = contextlib.nullcontext() if last else accelerator.no_sync(student)
    with sync:
        student_logits = student(input_ids=ids).logits[:, :-1]
        loss = distillation_loss(student_logits, teacher_logits, ids[:, 1:], cfg.temperature, cfg.ce_weight,
                                 cfg.kd_weight)
        accelerator.backward(loss / cfg.grad_accum)
    return loss.item() / cfg.grad_accum


def _save_student(cfg: DistilConfig, accelerator: Any, student: Any) -> None:
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(student)  # gathers FSDP shards; every rank must call it
    if accelerator.is_main_process:
        model = accelerator.unwrap_model(student)
        model.config.use_cache = True
        model.save_pretrained(cfg.output, state_dict=state, safe_serialization=True)
        copy_tokenizer_files(cfg)
    accelerator.wait_for_everyone()


def copy_tokenizer_files(cfg: DistilConfig) -> None:
    import shutil

    from edgeopt.passes.prune import COPIED_FILES

    for fname in COPIED_FILES:
        src = Path(cfg.student) / fname
        if src.is_file() and not (Path(cfg.output) / fname).exists():
            shutil.copy2(src, Path(cfg.output) / fname)


def parse_args(argv: list[str] | None = None) -> DistilConfig:
    parser = argparse.ArgumentParser(prog="python -m edgeopt.passes.distil_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(DistilConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.default is dataclasses.MISSING:
            parser.add_argument(flag, required=True)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    return DistilConfig(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    from accelerate import PartialState

    metrics = train(cfg)
    if PartialState().is_main_process:  # the parent process (DistilPass) reads this one line
        print("DISTIL_METRICS " + json.dumps(metrics), flush=True)


if __name__ == "__main__":
    main()
