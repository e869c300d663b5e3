"""The fourth format's memory model beyond its entry's figures: what its runtime builds from the file."""

from __future__ import annotations

EXTRA_BYTES = 1024**2  # a made-up table the fake runtime would build at load, to see the plan count it


def weights_extra_bytes(weights_bytes: int, vocab_size: int, hidden_size: int, tied_embeddings: bool) -> int:
    return EXTRA_BYTES
