"""Build the offline demo model: train a BPE tokenizer and a small Llama on the pydoc corpus.

``build_demo_model(out_dir)`` always trains (about 5 minutes on one CPU core); ``ensure_demo_model()``
returns the cached build for the recipe's key and trains only on a miss. The result is a normal HF
checkpoint directory: config.json, model.safetensors, generation_config.json, tokenizer files with a
ChatML chat template, eval.txt (held-out text for ``--eval-data``) and demo_recipe.json (recipe, key,
measured perplexities).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from edgeopt.demo.data import BatchSampler, CorpusSplit, TokenStreams, encode_streams, split_corpus
from edgeopt.demo.metrics import model_perplexity, unigram_perplexity
from edgeopt.demo.recipe import DemoRecipe, llama_config, package_versions, recipe_key
from edgeopt.demo.store import DONE_MARKER, build_once, demo_cache_root
from edgeopt.demo.tokenizer import SPECIAL_TOKENS, special_token_ids, train_bpe_tokenizer
from edgeopt.errors import MissingDependencyError

Reporter = Callable[[str], None]


def _silent(_: str) -> None:
    pass


def _require_training_stack() -> None:
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(f"building the demo model needs {exc.name}, which is not installed",
                                     "pip install 'edgeopt[optimize]'") from exc


def _strip_special(text: str) -> str:
    # The BPE merges are learned on plain text; special tokens are matched whole at encode time.
    for token in SPECIAL_TOKENS:
        text = text.replace(token, " ")
    return text


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    """Learning-rate multiplier: linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _make_optimizer(model, recipe: DemoRecipe):
    import torch

    # Decay matrices only: decaying norms' gains toward zero hurts a model this small.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=recipe.learning_rate, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: cosine_with_warmup(step, recipe.warmup_steps, recipe.steps))
    return optimizer, schedule


def train_model(model, streams: TokenStreams, recipe: DemoRecipe, report: Reporter) -> float:
    """Run ``recipe.steps`` AdamW steps; return the mean training loss of the last 20 steps."""
    import torch
    import torch.nn.functional as F

    sampler = BatchSampler(streams, recipe.seq_len, recipe.batch_size, recipe.chat_fraction, recipe.seed)
    optimizer, schedule = _make_optimizer(model, recipe)
    model.train()
    recent: list[float] = []
    started = time.perf_counter()
    for step in range(recipe.steps):
        batch = sampler.next_batch()
        logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        recent = (recent + [loss.item()])[-20:]
        if step % 50 == 0 or step == recipe.steps - 1:
            report(f"  step {step + 1}/{recipe.steps} loss {loss.item():.3f} "
                   f"({time.perf_counter() - started:.0f}s)")
    return sum(recent) / len(recent)


def _write_generation_config(out_dir: Path, ids: dict[str, int]) -> None:
    from transformers import GenerationConfig

    GenerationConfig(bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
                     eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]]).save_pretrained(out_dir)


def _prepare_data(out_dir: Path, recipe: DemoRecipe, report: Reporter) -> tuple[CorpusSplit, TokenStreams, dict]:
    split = split_corpus(recipe.eval_fraction, recipe.corpus_chars)
    report(f"corpus: {len(split.train_documents)} documents for training, {len(split.eval_text)} chars held out")
    texts = [_strip_special(t) for t in split.train_documents + split.chat_samples]
    train_bpe_tokenizer(texts, recipe.vocab_size, out_dir)
    ids = special_token_ids(out_dir)
    streams = encode_streams(out_dir, split, ids["<|endoftext|>"])
    report(f"tokens: {len(streams.documents)} document, {len(streams.chats)} chat, {len(streams.eval)} eval")
    return split, streams, ids


def build_demo_model(out_dir: Path, seed: int = 0, recipe: DemoRecipe | None = None,
                     report: Reporter = _silent) -> Path:
    """Train the demo model from scratch into ``out_dir`` (created if missing) and return it."""
    _require_training_stack()
    import torch
    from transformers import LlamaForCausalLM

    recipe = recipe or DemoRecipe(seed=seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(recipe.torch_threads)
    try:
        started = time.perf_counter()
        split, streams, ids = _prepare_data(out_dir, recipe, report)
        vocab_size = len(json.loads((out_dir / "tokenizer.json").read_text())["model"]["vocab"])
        torch.manual_seed(recipe.seed)
        model = LlamaForCausalLM(llama_config(recipe, vocab_size, ids))
        report(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {recipe.steps} steps")
        final_loss = train_model(model, streams, recipe, report)
        train_seconds = time.perf_counter() - started
        metrics = {
            "eval_perplexity": model_perplexity(model, streams.eval, recipe.seq_len),
            "unigram_perplexity": unigram_perplexity(streams.documents, streams.eval, vocab_size, recipe.seq_len),
            "final_train_loss": final_loss,
            "build_seconds": round(train_seconds, 1),
            "train_tokens": recipe.steps * recipe.batch_size * recipe.seq_len,
        }
        report("eval perplexity {eval_perplexity:.2f} (unigram baseline {unigram_perplexity:.2f})".format(**metrics))
        model.save_pretrained(out_dir, safe_serialization=True)
        _write_generation_config(out_dir, ids)
        (out_dir / "eval.txt").write_text(split.eval_text)
        meta = {"recipe": asdict(recipe), "key": recipe_key(recipe, split.sha256), "data_sha256": split.sha256,
                "packages": package_versions(), "metrics": metrics}
        (out_dir / DONE_MARKER).write_text(json.dumps(meta, indent=2))  # last: marks the build complete
    finally:
        torch.set_num_threads(previous_threads)
    return out_dir


def demo_model_key(seed: int = 0, recipe: DemoRecipe | None = None) -> str:
    recipe = recipe or DemoRecipe(seed=seed)
    return recipe_key(recipe, split_corpus(recipe.eval_fraction, recipe.corpus_chars).sha256)


def ensure_demo_model(seed: int = 0, recipe: DemoRecipe | None = None, report: Reporter = _silent,
                      cache_root: Path | None = None) -> Path:
    """The cached demo model for (recipe, corpus, library versions); trained once on a miss.

    ``seed`` picks the default recipe's seed; an explicit ``recipe`` carries its own. ``cache_root``
    defaults to :func:`edgeopt.demo.store.demo_cache_root`.
    """
    recipe = recipe or DemoRecipe(seed=seed)
    root = Path(cache_root) if cache_root is not None else demo_cache_root()
    final = root / f"demo-model-{demo_model_key(recipe=recipe)}"
    return build_once(final, lambda tmp: build_demo_model(tmp, recipe=recipe, report=report))
