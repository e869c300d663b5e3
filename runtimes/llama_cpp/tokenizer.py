"""The GGUF's own tokenizer through llama.cpp (``llama_tokenize`` / ``llama_token_to_piece``).

Serving needs no ``tokenizers``/``transformers``: the vocabulary, merges and pre-tokenizer travel in the
GGUF, so the ids we feed the model are exactly the ones llama.cpp's own tools would produce.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from edgeopt.errors import RequestError

_PIECE_BUFFER = 256


class LlamaCppTokenizer:
    def __init__(self, vocab: llama_cpp.llama_vocab_p) -> None:
        self._vocab = vocab
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._pieces: dict[int, bytes] = {}
        self._piece_buffer = ctypes.create_string_buffer(_PIECE_BUFFER)

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Tokenize; special-token text (``<|im_start|>``) is parsed as the special token."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        for _ in range(2):
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special, True)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count  # llama.cpp reports how many it needed
        raise RequestError(f"llama.cpp could not tokenize a {len(data)}-byte text", "check the text's encoding")

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes of a token (a byte-level piece may be part of a UTF-8 character); b"" for control."""
        piece = self._pieces.get(token_id)
        if piece is None:
            if not 0 <= token_id < self.vocab_size:
                raise RequestError(f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})",
                                   "use this model's token ids")
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, self._piece_buffer, _PIECE_BUFFER, 0, False)
            piece = self._piece_buffer.raw[:max(n, 0)]
            self._pieces[token_id] = piece
        return piece

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def eog_token_ids(self) -> frozenset[int]:
        """Every end-of-generation token (EOS, EOT, <|im_end|>, ...) the GGUF declares."""
        return frozenset(t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(self._vocab, t))
