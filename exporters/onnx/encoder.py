"""Encoders (sentence embeddings): export the transformer with optimum, carry its pooling into the bundle.

optimum exports the bare transformer (``last_hidden_state``); pooling and normalization are read
from the checkpoint's sentence-transformers configuration and applied by the runtime in numpy, so
the bundle needs neither torch nor sentence-transformers on the device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.measuring.metrics import min_cosine
from edgeopt.encoders.pooling import PoolingConfig, pad_batch, pool
from edgeopt.measuring.reference_embeddings import torch_embeddings

FP32_COSINE_LIMIT = 0.9999
PROBE_SENTENCES = (
    "The function returns a list of the keys.",
    "Open the file in binary mode before reading.",
    "A context manager releases the lock on exit, even after an exception.",
    "json",
)


def probe_ids(model_dir: Path) -> list[list[int]]:
    """Token ids of PROBE_SENTENCES via the checkpoint's tokenizer.json."""
    from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

    return BundleTokenizer(model_dir / "tokenizer.json").encode_batch(list(PROBE_SENTENCES))


def onnx_embeddings(onnx_path: Path, token_ids: list[list[int]], pooling: PoolingConfig, pad_token_id: int,
                    threads: int = 2) -> np.ndarray:
    from edgeopt.runtimes.onnxruntime.session import create_session

    session = create_session(onnx_path, threads, ["CPUExecutionProvider"])
    ids, mask = pad_batch(token_ids, pad_token_id)
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in {i.name for i in session.get_inputs()}:
        feed["token_type_ids"] = np.zeros_like(ids)
    return pool(session.run(None, feed)[0], mask, pooling)


def validate_encoder(model_dir: Path, onnx_path: Path, pooling: PoolingConfig) -> dict[str, Any]:
    token_ids = probe_ids(model_dir)
    reference = torch_embeddings(model_dir, token_ids, pooling)
    candidate = onnx_embeddings(onnx_path, token_ids, pooling, _pad_token_id(model_dir))
    cosine = min_cosine(reference, candidate)
    if not cosine >= FP32_COSINE_LIMIT:
        raise ExportError(f"the fp32 ONNX encoder of {model_dir} disagrees with torch: min cosine {cosine:.6f}",
                          "the export is broken for this architecture; report it")
    return {"fp32_min_cosine_vs_torch": cosine, "dimensions": int(reference.shape[1])}


def quantized_cosine(model_dir: Path, fp32_path: Path, quant_path: Path, pooling: PoolingConfig) -> dict[str, float]:
    token_ids = probe_ids(model_dir)
    pad = _pad_token_id(model_dir)
    ref = onnx_embeddings(fp32_path, token_ids, pooling, pad)
    cand = onnx_embeddings(quant_path, token_ids, pooling, pad)
    return {"probe_min_cosine_vs_fp32": min_cosine(ref, cand)}


def _pad_token_id(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text()).get("pad_token_id") or 0)


def encoder_input_limit(model_dir: Path) -> int:
    """The input limit the bundle's runtime will apply (edgeopt.sources.architectures.encoder_input_limit)."""
    from edgeopt.sources.architectures import encoder_input_limit as limit_of
    from edgeopt.encoders.pooling import read_sentence_transformers_pooling

    config = json.loads((model_dir / "config.json").read_text())
    return limit_of(config, read_sentence_transformers_pooling(model_dir).max_seq_length)
