"""Cross-encoders (rerankers): export the sequence classifier with optimum, carry its scoring into the bundle.

optimum exports the classifier (``logits``, one per pair); the activation and the pair limit are read from
the checkpoint's sentence-transformers configuration (edgeopt.encoders.cross_encoder) and written to
``model/rerank.json``, so the device scores pairs as ``CrossEncoder.predict`` does without torch. The
fp32 graph must give the original's scores within FP32_SCORE_LIMIT on the built-in ranking set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.encoders.cross_encoder import CrossEncoderConfig, load_cross_encoder_config, read_cross_encoder_config, \
    save_cross_encoder_config
from edgeopt.errors import ExportError
from edgeopt.sources.architectures import encoder_input_limit
from edgeopt.measuring.rerank_set import BUILTIN_RANKING_SET, compare_rankings
from edgeopt.runtimes.base import EncodedPair
from edgeopt.runtimes.pair_tokenizer import PairTokenizer

RERANK_TASK = "text-classification"
# fp32 ONNX and torch differ only by kernel rounding (~1e-6 on a sigmoid score); past this the export is broken
FP32_SCORE_LIMIT = 1e-4


def ranking_pairs(model_dir: Path, config: CrossEncoderConfig) -> list[list[EncodedPair]]:
    """The built-in ranking set, one list of tokenized pairs per query, via the checkpoint's tokenizer.json."""
    tokenizer = PairTokenizer(model_dir / "tokenizer.json", config.max_length)
    return [tokenizer.encode(query, list(documents)) for query, documents in BUILTIN_RANKING_SET]


def flatten(per_query: list[list[EncodedPair]]) -> list[EncodedPair]:
    return [pair for pairs in per_query for pair in pairs]


def split_by_query(scores: np.ndarray, per_query: list[list[EncodedPair]]) -> list[np.ndarray]:
    """``scores`` of the flattened pairs cut back into one array per query."""
    bounds = np.cumsum([len(pairs) for pairs in per_query])[:-1]
    return list(np.split(scores, bounds))


def onnx_scores(onnx_path: Path, pairs: list[EncodedPair], config: CrossEncoderConfig, pad_token_id: int,
                threads: int = 2) -> np.ndarray:
    from edgeopt.runtimes.onnxruntime.reranker import pad_pairs
    from edgeopt.runtimes.onnxruntime.session import create_session

    session = create_session(onnx_path, threads, ["CPUExecutionProvider"])
    ids, types, mask = pad_pairs(pairs, pad_token_id)
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in {i.name for i in session.get_inputs()}:
        feed["token_type_ids"] = types
    return config.scores(session.run(None, feed)[0])


def validate_rerank(model_dir: Path, onnx_path: Path, final_dir: Path) -> dict[str, Any]:
    """Write rerank.json into ``final_dir``; refuse an fp32 graph whose scores are not the original's."""
    from edgeopt.measuring.reference_scores import torch_rerank_scores

    model_config = json.loads((model_dir / "config.json").read_text())
    config = read_cross_encoder_config(model_dir, encoder_input_limit(model_config))
    final_dir.mkdir(parents=True, exist_ok=True)
    save_cross_encoder_config(config, final_dir)
    pad = int(model_config.get("pad_token_id") or 0)
    per_query = ranking_pairs(model_dir, config)
    reference = split_by_query(torch_rerank_scores(model_dir, flatten(per_query), config), per_query)
    candidate = split_by_query(onnx_scores(onnx_path, flatten(per_query), config, pad), per_query)
    comparison = compare_rankings(reference, candidate)
    if not comparison.max_abs_error <= FP32_SCORE_LIMIT:
        raise ExportError(f"the fp32 ONNX cross-encoder of {model_dir} disagrees with torch: largest score error "
                          f"{comparison.max_abs_error:.3g} > {FP32_SCORE_LIMIT}",
                          "the export is broken for this architecture; report it")
    return {"cross_encoder": config.to_dict(), "fp32_max_score_error_vs_torch": comparison.max_abs_error}


def quantized_scores(model_dir: Path, fp32_path: Path, quant_path: Path, final_dir: Path) -> dict[str, float]:
    """The quantized graph against the fp32 one on the built-in ranking set (the evaluation compares the
    bundle with the original itself)."""
    config = load_cross_encoder_config(final_dir)
    pad = int(json.loads((model_dir / "config.json").read_text()).get("pad_token_id") or 0)
    per_query = ranking_pairs(model_dir, config)
    reference = split_by_query(onnx_scores(fp32_path, flatten(per_query), config, pad), per_query)
    candidate = split_by_query(onnx_scores(quant_path, flatten(per_query), config, pad), per_query)
    return compare_rankings(reference, candidate).to_metrics("probe_vs_fp32")
