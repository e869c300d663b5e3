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
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from edgeopt.errors import BundleError, RequestError
from edgeopt.runtimes.control_text import ControlTextFinder

_PIECE_BUFFER = 256
# Tokens llama.cpp turns from text into ids only when asked to parse special tokens.
_PARSED_ONLY_WHEN_SPECIAL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
# Vocabularies whose tokenizer never drops or merges input bytes before matching pieces (BPE: bytes;
# SPM: pieces or byte fallback). WPM/UGM normalize (strip accents, collapse spaces): no bound for them.
_BOUNDED_TYPES = (llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_SPM)
# An SPM character with no piece and no byte token becomes one <unk>: up to 4 bytes of UTF-8.
_UTF8_CHAR_MAX = 4
_C_SPACE = " \t\n\r\v\f"  # llama.cpp strips with C's isspace, ASCII only


@dataclass(frozen=True)
class _Control:
    token_id: int
    lstrip: bool  # llama.cpp drops whitespace before the token
    rstrip: bool  # ... and after it


@dataclass(frozen=True)
class _VocabScan:
    controls: dict[str, _Control]  # control-token text -> its token (read only once made)
    longest: int  # the most bytes one token's text spans
    eog: frozenset[int]


class _ScanCache:
    """Scans of the files loaded lately, by file identity: a server swapping models reloads the same GGUFs,
    and the scan costs 70 ms for a 49k vocabulary (0.5 s for 150k) on every load otherwise."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._scans: OrderedDict[Hashable, _VocabScan] = OrderedDict()
        self._lock = threading.Lock()  # models load in worker threads

    def get(self, key: Hashable) -> _VocabScan | None:
        with self._lock:
            scan = self._scans.get(key)
            if scan is not None:
                self._scans.move_to_end(key)
            return scan

    def put(self, key: Hashable, scan: _VocabScan) -> None:
        with self._lock:
            self._scans[key] = scan
            while len(self._scans) > self._entries:
                self._scans.popitem(last=False)


_SCANS = _ScanCache(entries=16)


class LlamaCppTokenizer:
    def __init__(self, vocab: llama_cpp.llama_vocab_p, file_key: Hashable | None = None) -> None:
        """``file_key`` names the GGUF this vocabulary came from (path, size, mtime): its scan is then made
        once per process. None scans every time (a vocabulary whose file is not known)."""
        self._vocab = vocab
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._pieces: dict[int, bytes] = {}
        self._piece_buffer = ctypes.create_string_buffer(_PIECE_BUFFER)
        scan = _SCANS.get(file_key) if file_key is not None else None
        if scan is None:
            scan = self._scan_vocab()
            if file_key is not None:
                _SCANS.put(file_key, scan)
        self._controls, self._eog = scan.controls, scan.eog
        self._finder = ControlTextFinder(self._controls)
        bounded = llama_cpp.llama_vocab_type(vocab) in _BOUNDED_TYPES
        self._max_token_bytes = max(scan.longest, _UTF8_CHAR_MAX) if bounded else None

    def _scan_vocab(self) -> _VocabScan:
        """One pass over the vocabulary (~0.5 s for 150k tokens): control tokens by text, the most bytes one
        token's text spans (control text included), and the end-of-generation tokens."""
        controls: dict[str, _Control] = {}
        longest = 0
        eog: set[int] = set()
        buffer = ctypes.create_string_buffer(_PIECE_BUFFER)
        for token_id in range(self.vocab_size):
            if llama_cpp.llama_vocab_is_eog(self._vocab, token_id):
                eog.add(token_id)
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, buffer, _PIECE_BUFFER, 0, True)
            longest = max(longest, abs(n))  # negative: the piece needs -n bytes (longer than the buffer)
            attr = int(llama_cpp.llama_vocab_get_attr(self._vocab, token_id))
            if attr & _PARSED_ONLY_WHEN_SPECIAL and n != 0:
                text = self._special_piece(token_id, buffer, n).decode("utf-8", errors="replace")
                controls.setdefault(text, _Control(token_id, bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                                                   bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP)))
        return _VocabScan(controls, longest, frozenset(eog))

    def _special_piece(self, token_id: int, buffer: ctypes.Array, n: int) -> bytes:
        if n > 0:
            return buffer.raw[:n]
        big = ctypes.create_string_buffer(-n)  # a rare control text longer than the scan's buffer
        return big.raw[:llama_cpp.llama_token_to_piece(self._vocab, token_id, big, -n, 0, True)]

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

    def _split_at_controls(self, text: str) -> list[tuple[str, _Control | None]]:
        """[(plain text before a control token, that token)], the last with None; lstrip/rstrip applied."""
        parts: list[tuple[str, _Control | None]] = []
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
            n = llama_cpp.llama_token_to_piece(self._vocab, token_id, self._piece_buffer, _PIECE_BUFFER, 0, False)
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
