"""Check an exported model against its source: KL divergence of logits, cosine of embeddings."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def mean_kl(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Mean over positions of KL(reference || candidate), both (positions, vocab) logits."""
    ref, cand = log_softmax(reference), log_softmax(candidate)
    return float(np.mean(np.sum(np.exp(ref) * (ref - cand), axis=-1)))


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    return float(np.mean(reference.argmax(axis=-1) == candidate.argmax(axis=-1)))


def min_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Smallest row-wise cosine similarity between two (n, dim) embedding matrices."""
    num = np.sum(reference * candidate, axis=1)
    den = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    return float(np.min(num / np.clip(den, 1e-12, None)))


def probe_token_ids(vocab_size: int, length: int = 48, seed: int = 1234) -> list[int]:
    """A fixed pseudo-random token sequence: exercises every layer without needing a tokenizer."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size, size=length).tolist()


PROBE_TEXT = (
    "def read_config(path):\n    \"\"\"Return the settings stored in a JSON file.\"\"\"\n"
    "    with open(path, encoding='utf-8') as handle:\n        return json.load(handle)\n\n"
    "The collections module provides specialized container datatypes, such as namedtuple, deque and "
    "Counter, as alternatives to the general purpose built-in containers dict, list, set and tuple."
)


def probe_text_ids(tokenizer_json, vocab_size: int) -> list[int]:
    """Token ids of a fixed text through the model's own tokenizer; activations on real text are what a
    quantized model is calibrated for, unlike random ids. Falls back to random ids without a tokenizer."""
    from pathlib import Path

    if not Path(tokenizer_json).is_file():
        return probe_token_ids(vocab_size)
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tokenizer_json)).encode(PROBE_TEXT, add_special_tokens=False).ids
    return [i for i in ids if i < vocab_size]
