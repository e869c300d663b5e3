"""How much did optimizing cost? Perplexity, KL divergence and top-1 agreement against the original.

Shared by every bundle format: the bundle's model is reached through a scorer
(:mod:`edgeopt.measuring.scorers`, chosen by ``manifest.format``), the original through its format's reference
(GGUF: the unquantized file in llama.cpp) or transformers. Both read the same token ids, cut into windows; each
window's next-token distributions are compared position by position. Without ``--eval-data`` the held-out text
is what the original model itself writes from a few seed prompts, a window per prompt (edgeopt.measuring.eval_text:
generated once per model, then cached; a reference that keeps the logits it writes with is not run over it
again), so the numbers say how faithfully the optimized model reproduces the original's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt import backends
from edgeopt.errors import EvaluationError
from edgeopt.measuring.metrics import Comparison
from edgeopt.measuring.reference_logits import StoredLogits, stored_logits
from edgeopt.measuring.scorers import Reference, load_bundle_scorer, load_reference
from edgeopt.measuring.eval_text import SEED_PROMPTS, generated_eval_rows, threads_following_load
from edgeopt.evaluation.kv_cache import kv_cache_cost, needs_kv_cache_evaluation
from edgeopt.progress import progress
from edgeopt.sources.textfile import read_text_file

if TYPE_CHECKING:
    from edgeopt.runtimes.llama_cpp.threads import ThreadGovernor

DEFAULT_WINDOW = 256
DEFAULT_MAX_TOKENS = 1024


def read_eval_text(path: Path) -> str:
    return read_text_file(path, "evaluation data", "--eval-data/--data", EvaluationError)


class _TransformersTokenizer:
    """The evaluation's tokenizer from a bundle's tokenizer files, for formats without one of their own."""

    def __init__(self, tokenizer_dir: Path) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        # The whole evaluation text is tokenized at once and then cut into windows, so its length may
        # exceed the model's context without any window doing so: silence that warning.
        self._tokenizer.model_max_length = 1 << 62
        self.bos = self._tokenizer.bos_token_id if getattr(self._tokenizer, "add_bos_token", False) else None

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)


@contextmanager
def eval_tokenizer(bundle_dir: Path, manifest: Any) -> Iterator[Any]:
    """What tokenizes the evaluation text: the format's own (GGUF: llama.cpp's, from the bundle's file), else
    transformers' from the bundle's tokenizer files."""
    own = backends.backend(manifest.format).export.tokenizer if manifest.format in backends.formats() else None
    if own is None:
        yield _TransformersTokenizer(bundle_dir / manifest.tokenizer_dir)
        return
    with backends.load_attr(own)(bundle_dir, manifest) as tokenizer:
        yield tokenizer


def windows(token_ids: list[int], window: int, max_tokens: int, bos: int | None) -> list[list[int]]:
    """Consecutive windows of at most ``window`` tokens (each led by BOS when the model expects one)."""
    body = window - (1 if bos is not None else 0)
    ids = token_ids[:max_tokens]
    out = []
    for start in range(0, len(ids), body):
        chunk = ids[start:start + body]
        if len(chunk) >= 2:
            out.append(([bos] if bos is not None else []) + chunk)
    return out


def evaluate_bundle(bundle_dir: Path, manifest: Any, original_model_dir: Path | None, eval_data: Path | None,
                    workbench: Path | None = None, window: int = DEFAULT_WINDOW, max_tokens: int = DEFAULT_MAX_TOKENS,
                    threads: int = 2) -> dict[str, Any]:
    """Quality metrics of the bundle's model; KL/top-1 need the original checkpoint, perplexity needs text.
    ``workbench``: the optimize run's working directory, where a format with a reference of its own (GGUF: the
    unquantized file the export wrote) finds it; without one the original is loaded with transformers.

    Embedding bundles are measured by edgeopt.evaluation.embeddings instead (cosines, neighbours), rerank
    bundles by edgeopt.evaluation.rerank (score error and ranking agreement)."""
    if manifest.kind == "embedding":
        from edgeopt.evaluation.embeddings import evaluate_embedding_bundle

        return evaluate_embedding_bundle(bundle_dir, manifest, original_model_dir, eval_data, threads=threads)
    if manifest.kind == "rerank":
        from edgeopt.evaluation.rerank import evaluate_rerank_bundle

        return evaluate_rerank_bundle(bundle_dir, manifest, original_model_dir, eval_data, threads=threads)
    # Torch and llama.cpp threads meet at a barrier after every operation: with other processes on the cores, a
    # fixed 2 threads is many times slower than 1 (edgeopt.measuring.eval_text has the measurement).
    with threads_following_load(threads) as governor:
        return _evaluate_causal_lm(Path(bundle_dir), manifest, original_model_dir, eval_data, workbench, window,
                                   max_tokens, governor)


def _evaluate_causal_lm(bundle_dir: Path, manifest: Any, original_model_dir: Path | None, eval_data: Path | None,
                        workbench: Path | None, window: int, max_tokens: int,
                        governor: ThreadGovernor) -> dict[str, Any]:
    """Perplexity, and KL/top-1 against the original; the scorers get the threads ``governor`` found free, the
    original's torch follows the load window by window. The original runs first and is closed before the bundle's
    model loads (its logits wait on disk, edgeopt.measuring.reference_logits): one model in memory at a time."""
    threads = governor.threads
    with eval_tokenizer(bundle_dir, manifest) as tokenizer:
        bos = tokenizer.bos
        eval_ids = tokenizer.encode(read_eval_text(eval_data)) if eval_data is not None else None
        prompt_ids = [([bos] if bos is not None else []) + tokenizer.encode(p) for p in SEED_PROMPTS]
    reference = (load_reference(manifest.format, Path(original_model_dir), workbench, window, threads)
                 if original_model_dir is not None else None)
    with stored_logits(workbench) as stored:
        try:
            chunks, source = _windows_to_score(eval_ids, prompt_ids, bos, eval_data, original_model_dir, reference,
                                               window, max_tokens, governor, stored)
            if reference is not None and stored.count == 0:  # not kept while the reference wrote the text
                for chunk in progress(chunks, "evaluating: the original"):
                    governor.before_decode()
                    stored.append(reference.score(chunk))
        finally:
            if reference is not None:
                reference.close()
        scorer = load_bundle_scorer(bundle_dir, manifest, context=window, threads=threads)
        try:
            metrics = _compare(chunks, scorer, stored if reference is not None else None, source,
                               governor.before_decode)
        finally:
            scorer.close()
    if needs_kv_cache_evaluation(manifest):  # a quantized KV cache is a step with its own quality cost
        metrics |= kv_cache_cost(chunks, bundle_dir, manifest, window, threads)
    return metrics


def _windows_to_score(eval_ids: list[int] | None, prompt_ids: list[list[int]], bos: int | None,
                      eval_data: Path | None, original_model_dir: Path | None, reference: Reference | None,
                      window: int, max_tokens: int, governor: ThreadGovernor,
                      stored: StoredLogits) -> tuple[list[list[int]], str]:
    """The evaluation text's windows (the user's file, else the text the original writes from the seed prompts,
    whose logits go to ``stored`` as it is written where the reference keeps them) and where it came from."""
    if eval_ids is not None:
        chunks = windows(eval_ids, window, max_tokens, bos)
        source = f"file:{Path(eval_data).name}"
    elif reference is not None:
        rows, _cached = generated_eval_rows(Path(original_model_dir), reference, prompt_ids, governor.before_decode,
                                            logits=stored)
        chunks = row_windows(rows, window, max_tokens)
        source = f"generated:{len(SEED_PROMPTS)} seed prompts"
    else:
        raise EvaluationError("nothing to evaluate on: no --data text and no original model to generate text",
                              "pass --data FILE (and --original MODEL for KL/top-1)")
    if not chunks:
        raise EvaluationError("the evaluation text gave no window of 2 tokens or more", "pass a longer text")
    return chunks, source


def row_windows(rows: list[list[int]], window: int, max_tokens: int) -> list[list[int]]:
    """The written rows as windows, each without its last token (the writer never ran it, so kept no logits
    after it), as many rows as ``max_tokens`` holds (the first always)."""
    chunks: list[list[int]] = []
    for row in rows:
        if len(row) - 1 > window:
            raise EvaluationError(f"a written evaluation row of {len(row) - 1} tokens exceeds the window of {window}",
                                  f"evaluate with a window of at least {len(row) - 1} tokens")
        if chunks and sum(map(len, chunks)) + len(row) - 1 > max_tokens:
            break
        if len(row) > 2:
            chunks.append(row[:-1])
    return chunks


def _compare(chunks: list[list[int]], scorer: Any, reference: StoredLogits | None, source: str,
             before_window: Callable[[], None] = lambda: None) -> dict[str, Any]:
    candidate_only, against_original, original = Comparison(), Comparison(), Comparison()
    for index, chunk in enumerate(progress(chunks, "evaluating")):
        before_window()
        cand = scorer.score(chunk)
        candidate_only.add(cand, cand, chunk)
        if reference is None:
            continue
        ref = reference[index]
        if ref.shape[1] != cand.shape[1]:
            raise EvaluationError(f"vocabularies differ: original {ref.shape[1]}, bundle {cand.shape[1]} tokens",
                                  "evaluate against the checkpoint this bundle was made from (--original)")
        against_original.add(ref, cand)
        original.add(ref, ref, chunk)
    metrics: dict[str, Any] = {"perplexity": round(candidate_only.perplexity, 4),
                               "eval_tokens": candidate_only.nll_count, "eval_source": source}
    if reference is not None:
        metrics |= {"perplexity_original": round(original.perplexity, 4),
                    "kl_divergence": float(f"{against_original.mean_kl:.6g}"),
                    "top1_agreement": round(against_original.top1_agreement, 4)}
    return metrics
