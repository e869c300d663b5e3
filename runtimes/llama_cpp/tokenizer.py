"""The GGUF's own tokenizer through llama.cpp (``llama_tokenize`` / ``llama_token_to_piece``).

Serving needs no ``tokenizers``/``transformers``: the vocabulary, merges and pre-tokenizer travel in the
GGUF, so the ids we feed the model are exactly the ones llama.cpp's own tools would produce.

Control-token text is split out here, not by llama.cpp: its splitter re-scans the rest of the text for
every occurrence, so a 350 KB prompt of ``"<|endoftext|>a" x 25000`` took seconds (quadratic). We split
the same way it does (at control-token text, honouring the tokens' lstrip/rstrip attributes) in one
linear pass, then let llama.cpp tokenize each plain fragment with special parsing off. A fragment after
a control token starts a new llama.cpp call, which is exactly where llama.cpp itself restarts (its
SentencePiece space prefix follows a control token), so the ids are the same.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Hashable, Iterator
from pathlib import Path

import llama_cpp

from edgeopt.errors import BundleError, RequestError
from edgeopt.runtimes.control_text import ControlTextFinder
from edgeopt.runtimes.llama_cpp.vocab_scan import PIECE_BUFFER, Control, cached_scan

# Vocabularies whose tokenizer never drops or merges input bytes before matching pieces (BPE: bytes;
# SPM: pieces or byte fallback). WPM/UGM normalize (strip accents, collapse spaces): no bound for them.
_BOUNDED_TYPES = (llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_SPM)
# An SPM character with no piece and no byte token becomes one <unk>: up to 4 bytes of UTF-8.
_UTF8_CHAR_MAX = 4
_C_SPACE = " \t\n\r\v\f"  # llama.cpp strips with C's isspace, ASCII only


class LlamaCppTokenizer:
    def __init__(self, vocab: llama_cpp.llama_vocab_p, file_key: Hashable | None = None) -> None:
        """``file_key`` names the GGUF this vocabulary came from (path, size, mtime): its scan is then made
        once per file (runtimes/llama_cpp/vocab_scan.py). None scans every time (a vocabulary whose file is not known)."""
        self._vocab = vocab
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._pieces: dict[int, bytes] = {}
        self._piece_buffer = ctypes.create_string_buffer(PIECE_BUFFER)
        scan = cached_scan(vocab, file_key)
        self._controls, self._eog = scan.controls, scan.eog
        self._finder = ControlTextFinder(self._controls)
        bounded = llama_cpp.llama_vocab_type(vocab) in _BOUNDED_TYPES
        self._max_token_bytes = max(scan.longest, _UTF8_CHAR_MAX) if bounded else None

    def control_token_texts(self) -> tuple[str, ...]:
        """Texts that become a control token when special tokens are parsed."""
        return self._finder.texts

    def control_token_ids(self) -> dict[str, int]:
        return {text: control.token_id for text, control in self._controls.items()}

    def max_token_bytes(self) -> int | None:
        """Most bytes of input text one token can stand for; None when the vocabulary gives no bound."""
        return self._max_token_bytes

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Tokenize. With ``parse_special``, control-token text (``<|im_start|>``) becomes the control token;
        without, it is tokenized as the plain characters it is."""
        if not parse_special or not self._finder.search(text):
            return self._tokenize(text, add_special, parse_special)
        ids: list[int] = []
        for fragment, control in self._split_at_controls(text):
            if fragment:
                ids += self._tokenize(fragment, False, False)
            if control is not None:
                ids.append(control.token_id)
        return self._with_added_specials(ids) if add_special else ids

    def _with_added_specials(self, ids: list[int]) -> list[int]:
        """What llama_tokenize's add_special adds around the text: BOS (BERT: CLS) before, EOS / SEP after."""
        v = self._vocab
        before = [llama_cpp.llama_vocab_bos(v)] if llama_cpp.llama_vocab_get_add_bos(v) else []
        after = [llama_cpp.llama_vocab_eos(v)] if llama_cpp.llama_vocab_get_add_eos(v) else []
        after += [llama_cpp.llama_vocab_sep(v)] if llama_cpp.llama_vocab_get_add_sep(v) else []
        return [*(int(t) for t in before if t >= 0), *ids, *(int(t) for t in after if t >= 0)]

    def _split_at_controls(self, text: str) -> list[tuple[str, Control | None]]:
        """[(plain text before a control token, that token)], the last with None; lstrip/rstrip applied."""
        parts: list[tuple[str, Control | None]] = []
        pos = 0
        strip_next = False
        for match in self._finder.finditer(text):
            control = self._controls[match.text]
            fragment = text[pos:match.start]
            fragment = fragment.lstrip(_C_SPACE) if strip_next else fragment
            parts.append((fragment.rstrip(_C_SPACE) if control.lstrip else fragment, control))
            pos, strip_next = match.end, control.rstrip
        tail = text[pos:]
        parts.append((tail.lstrip(_C_SPACE) if strip_next else tail, None))
        return parts

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        for _ in range(2):
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special,
                                             parse_special)
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
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, self._piece_buffer, PIECE_BUFFER, 0, False)
            piece = self._piece_buffer.raw[:max(n, 0)]
            self._pieces[token_id] = piece
        return piece

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def eog_token_ids(self) -> frozenset[int]:
        """Every end-of-generation token (EOS, EOT, <|im_end|>, ...) the GGUF declares."""
        return self._eog


@contextlib.contextmanager
def gguf_vocabulary(path: Path) -> Iterator[LlamaCppTokenizer]:
    """The tokenizer of the GGUF at ``path`` as llama.cpp reads it, loading the vocabulary only (no weights)."""
    from edgeopt.runtimes.llama_cpp.model import init_backend

    init_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise BundleError(f"llama.cpp could not read the vocabulary of {path}",
                          "check that it is a GGUF this llama-cpp-python supports and not truncated")
    try:
        yield LlamaCppTokenizer(llama_cpp.llama_model_get_vocab(model))
    finally:
        llama_cpp.llama_model_free(model)
