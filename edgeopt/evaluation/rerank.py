"""How much did optimizing a cross-encoder cost? Score error and ranking agreement against the original.

The bundle runs through its own runtime, exactly as served; the original runs in transformers with the
activation of its sentence-transformers configuration (edgeopt/measuring/reference_scores.py), on the same token
ids. The figures (edgeopt.measuring.rerank_set): the largest score error, the mean Spearman correlation of each
query's two orders, and how often both put the same candidate first. ``rerank_original_hit_rate`` says
whether the original ranks the built-in set at all; when it ranks no better than chance (a random-init
head), ``rerank_note`` says that the figures cannot tell what quantization costs a trained reranker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import EvaluationError
from edgeopt.measuring.rerank_set import BUILTIN_RANKING_SET, chance_hit_rate, compare_rankings, hit_rate

# A trained reranker puts the relevant candidate first on nearly every built-in query (they are easy); one
# that misses it on more than a quarter of them (chance hits a quarter) is not ranking, whatever its scores.
TRAINED_HIT_RATE = 0.75


def evaluate_rerank_bundle(bundle_dir: Path, manifest: Any, original_model_dir: Path | None,
                           eval_data: Path | None, threads: int = 2) -> dict[str, Any]:
    if original_model_dir is None:
        raise EvaluationError("a rerank bundle is measured against its original model, and none was given",
                              "drop --no-original, or pass --original MODEL")
    if eval_data is not None:
        raise EvaluationError(f"--eval-data {eval_data}: a rerank bundle is measured on the built-in ranking set "
                              "(queries with labelled candidates); a text file has no labels",
                              "drop --eval-data for a rerank bundle")
    reference, candidate = _score_both(Path(bundle_dir), manifest, Path(original_model_dir), threads)
    comparison = compare_rankings(reference, candidate)
    original_hits = hit_rate(reference)
    metrics: dict[str, Any] = {**comparison.to_metrics("rerank"), "rerank_original_hit_rate": round(original_hits, 4),
                               "rerank_bundle_hit_rate": round(hit_rate(candidate), 4),
                               "eval_pairs": sum(len(s) for s in reference),
                               "eval_source": f"builtin:{len(BUILTIN_RANKING_SET)} queries with a relevant candidate"}
    if original_hits < TRAINED_HIT_RATE:
        metrics["rerank_note"] = (
            f"the original ranks the relevant candidate first on {original_hits:.0%} of the built-in queries (chance "
            f"{chance_hit_rate():.0%}, a trained reranker {TRAINED_HIT_RATE:.0%} or more): it is not a trained "
            "reranker, so these figures measure the export's arithmetic, not what quantization costs a trained "
            "reranker's ranking")
    return metrics


def _score_both(bundle_dir: Path, manifest: Any, original_model_dir: Path, threads: int) -> tuple[list, list]:
    """(original's, bundle's) scores of the built-in ranking set, one array per query, on the same ids."""
    import torch

    from edgeopt.exporters.onnx.rerank import flatten, split_by_query
    from edgeopt.measuring.reference_scores import torch_rerank_scores
    from edgeopt.runtimes import load_rerank_runtime

    runtime = load_rerank_runtime(manifest.runtime, bundle_dir, manifest, threads=threads)
    try:
        per_query = [runtime.encode_pairs(query, list(documents)) for query, documents in BUILTIN_RANKING_SET]
        candidate = split_by_query(runtime.score_pairs(flatten(per_query)), per_query)
        config = runtime.config
    finally:
        runtime.close()
    torch.set_num_threads(threads)
    reference = split_by_query(torch_rerank_scores(original_model_dir, flatten(per_query), config), per_query)
    return reference, candidate
