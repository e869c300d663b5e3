"""Benchmark: prune the trained demo model by 25% of its non-embedding parameters, distil it back on
at most 2M tokens, and compare with the same architecture trained from random init on the same tokens.

    .venv/bin/python tests/bench/bench_prune_distil.py [--steps 480] [--batch-size 16] [--out DIR]
    .venv/bin/python -m pytest tests/bench/bench_prune_distil.py -m slow -q -s

Reports perplexity on the demo model's held-out eval.txt for: original, pruned, distilled, scratch;
recovery = (ppl_pruned - ppl_distilled) / (ppl_pruned - ppl_original). Done when recovery >= 0.6
and the distilled student beats the scratch model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

MAX_TOKENS = 2_000_000
EVAL_TOKENS = 16_384


def _write_training_text(path: Path) -> Path:
    from edgeopt.demo.data import split_corpus
    from edgeopt.demo.recipe import DemoRecipe

    path.write_text("\n\n".join(split_corpus(DemoRecipe().eval_fraction).train_documents))
    return path


def _scratch_model(pruned_dir: Path, out: Path, seed: int = 0) -> Path:
    """Random-init model with the pruned architecture and the same tokenizer files."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from edgeopt.passes.prune import save_checkpoint

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(pruned_dir))
    save_checkpoint(model, pruned_dir, out)
    return out


def run_benchmark(work: Path, steps: int = 480, batch_size: int = 16, seq_len: int = 256, distil_lr: float = 1e-3,
                  scratch_lr: float = 3e-3, threads: int = 1, teacher: Path | None = None, report=print) -> dict:
    import torch

    from edgeopt.demo.train import ensure_demo_model
    from edgeopt.passes import PassContext
    from edgeopt.passes.distil import DistilPass
    from edgeopt.passes.distil_data import eval_blocks
    from edgeopt.passes.distil_train import DistilConfig, train
    from edgeopt.measuring.torch_metrics import load_causal_lm, perplexity
    from edgeopt.passes.prune import PrunePass

    tokens = steps * batch_size * seq_len
    assert tokens <= MAX_TOKENS, f"{tokens} tokens exceeds the {MAX_TOKENS} budget"
    torch.set_num_threads(threads)
    demo = teacher or ensure_demo_model(report=report)
    data = _write_training_text(work / "train.txt")
    # The demo model ships its held-out eval.txt; another teacher is evaluated on the data's held-out tail.
    eval_file = demo / "eval.txt" if (demo / "eval.txt").is_file() else None
    ctx = PassContext(original_model_dir=demo, target="host", data_file=eval_file, work_dir=work / "ckpt")
    started = time.perf_counter()
    (work / "pruned").mkdir()
    pruned = PrunePass(ratio=0.25, calib_data=str(data), eval_tokens=EVAL_TOKENS).run(demo, work / "pruned", ctx)
    report(f"pruned: {pruned['non_embedding_reduction']:.1%} of non-embedding params, shape {pruned['shape_after']}, "
           f"ppl {pruned['reference_perplexity']:.2f} -> {pruned['perplexity']:.2f}")
    (work / "distilled").mkdir()
    distilled = DistilPass(data=str(data), steps=steps, batch_size=batch_size, seq_len=seq_len, lr=distil_lr,
                           checkpoint_every=100, eval_tokens=EVAL_TOKENS,
                           threads=threads).run(work / "pruned", work / "distilled", ctx)
    report(f"distilled: ppl {distilled['perplexity']:.2f}, KL {distilled['before_kl_to_original']:.3f} -> "
           f"{distilled['kl_to_original']:.3f}, {distilled['tokens_per_s']:.0f} tok/s")
    scratch_init = _scratch_model(work / "pruned", work / "scratch-init")
    cfg = DistilConfig(student=str(scratch_init), teacher=str(demo), data=str(data), output=str(work / "scratch"),
                       work_dir=str(work / "ckpt-scratch"), steps=steps, batch_size=batch_size, seq_len=seq_len,
                       lr=scratch_lr, kd_weight=0.0, ce_weight=1.0, checkpoint_every=0, threads=threads)
    train(cfg)
    blocks, _ = eval_blocks(demo, eval_file, data, EVAL_TOKENS)
    scratch_ppl = perplexity(load_causal_lm(work / "scratch"), blocks)
    original, before, after = pruned["reference_perplexity"], pruned["perplexity"], distilled["perplexity"]
    result = {
        "train_tokens": tokens, "original_ppl": original, "pruned_ppl": before, "distilled_ppl": after,
        "scratch_ppl": scratch_ppl, "recovery": (before - after) / (before - original),
        "non_embedding_reduction": pruned["non_embedding_reduction"], "kl_pruned": pruned["kl_to_original"],
        "kl_distilled": distilled["kl_to_original"], "distil_tokens_per_s": distilled["tokens_per_s"],
        "seconds": time.perf_counter() - started,
    }
    report(json.dumps(result, indent=2))
    return result


@pytest.mark.slow
def test_distillation_recovers_pruning_loss(tmp_path: Path) -> None:
    result = run_benchmark(tmp_path)
    assert result["train_tokens"] <= MAX_TOKENS
    assert result["recovery"] >= 0.6
    assert result["distilled_ppl"] < result["scratch_ppl"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=480)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--distil-lr", type=float, default=1e-3)
    parser.add_argument("--scratch-lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core box)")
    parser.add_argument("--teacher", type=Path, default=None, help="checkpoint to prune (default: the demo model)")
    parser.add_argument("--out", type=Path, default=None, help="keep the models here (default: a temp dir)")
    args = parser.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-prune-distil-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run_benchmark(work, args.steps, args.batch_size, args.seq_len, args.distil_lr, args.scratch_lr, args.threads,
                      args.teacher)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
