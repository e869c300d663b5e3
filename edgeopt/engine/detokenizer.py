"""Incremental, UTF-8-safe detokenization: token ids in, text deltas out, never half a character.

Byte-level BPE tokens can split one character across tokens (an emoji is often 2-4 tokens), so we
feed each token's raw bytes to an incremental UTF-8 decoder, which holds back an incomplete trailing
sequence until the bytes that complete it arrive. Invalid bytes become U+FFFD rather than an error.
"""

from __future__ import annotations

import codecs

from edgeopt.runtimes.base import Tokenizer


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, skip_ids: frozenset[int] = frozenset()) -> None:
        self._tokenizer = tokenizer
        self._skip_ids = skip_ids  # e.g. EOS / stop token ids: they end the text, they are not text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        if token_id in self._skip_ids:
            return ""
        return self._decoder.decode(self._tokenizer.token_bytes(token_id), final=False)

    def flush(self) -> str:
        """End of stream: any dangling partial character becomes U+FFFD."""
        return self._decoder.decode(b"", final=True)
