"""Probe inputs for checking an exported model against its source (the metrics are edgeopt.measuring.metrics')."""

from __future__ import annotations

import numpy as np


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
    from edgeopt.runtimes.bundle_tokenizer import open_tokenizer

    ids = open_tokenizer(Path(tokenizer_json)).encode(PROBE_TEXT, add_special_tokens=False).ids
    return [i for i in ids if i < vocab_size]
