"""The quality cost of a quantized KV cache: logits with the bundle's q8_0/q4_0 cache against the same
model with an f16 cache (llama.cpp's default), on the same evaluation windows as every other step.

Both sides run the same model through the format's own scorer (the backend registry's: llama.cpp with
flash attention for GGUF), so the numbers isolate the cache's storage type: within a window every
position's attention already reads keys and values back from the (quantized) cache, as serving does. Recorded in the manifest as ``kv_cache_*`` metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.measuring.metrics import Comparison
from edgeopt.measuring.scorers import load_bundle_scorer
from edgeopt import backends
from edgeopt.sizing.bundle_facts import recorded_kv_type
from edgeopt.sizing.kv_types import KV_TYPES
from edgeopt.progress import progress

REFERENCE_KV_TYPE = "f16"


def needs_kv_cache_evaluation(manifest: Any) -> bool:
    """A gguf bundle whose manifest records a quantized KV cache type."""
    kv_type = recorded_kv_type(manifest)
    return kv_type in backends.backend(manifest.format).serving.kv_cache_types and KV_TYPES[kv_type].quantized


def kv_cache_cost(chunks: list[list[int]], bundle_dir: Path, manifest: Any, window: int,
                  threads: int = 2) -> dict[str, Any]:
    """KL(f16 cache || quantized cache) and top-1 agreement over ``chunks`` (token windows)."""
    kv_type = recorded_kv_type(manifest)
    comparison = Comparison()
    reference = load_bundle_scorer(bundle_dir, manifest, context=window, threads=threads, kv_type=REFERENCE_KV_TYPE)
    try:
        candidate = load_bundle_scorer(bundle_dir, manifest, context=window, threads=threads, kv_type=kv_type)
        try:
            for chunk in progress(chunks, f"evaluating the {kv_type} KV cache"):
                comparison.add(reference.score(chunk), candidate.score(chunk))
        finally:
            candidate.close()
    finally:
        reference.close()
    return {"kv_cache_type": kv_type, "kv_cache_kl_divergence": float(f"{comparison.mean_kl:.6g}"),
            "kv_cache_top1_agreement": round(comparison.top1_agreement, 4), "kv_cache_reference": REFERENCE_KV_TYPE}
