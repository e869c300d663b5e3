"""The bundle's tokenizer on the `tokenizers` library alone (no transformers on the serving path).

``token_bytes`` must give the *raw* bytes of a token so the engine's detokenizer can stream UTF-8
safely. Vocabulary strings are not raw bytes: byte-level BPE (GPT-2, Qwen, Llama 3) maps every byte
to a printable unicode character, and SentencePiece-style vocabularies (Llama 2, Mistral) write a
space as "▁" and unknown bytes as "<0xNN>". Both mappings are undone here, once, into a table.

A tokenizer.json may also switch on ``padding`` and ``truncation`` (all-MiniLM-L6-v2 pads every text to
a fixed 128 tokens and truncates at 128). transformers ignores both unless a call asks for them, and
sentence-transformers asks for truncation at its own ``max_seq_length``; the `tokenizers` library, in
contrast, applies them to every encode. So the file is opened with both switched off
(:func:`open_tokenizer`): prompts are never padded or cut, an encoder pads its batches itself with a
mask of real tokens, and truncation happens only where a caller asks (``max_length``), the way
transformers does it (content cut, special tokens kept).
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

from edgeopt.errors import BundleError, ConfigError
from edgeopt.runtimes.token_bounds import max_input_bytes_per_token


def byte_level_decoder_table() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable stand-in character -> byte value.

    Printable latin-1 bytes stand for themselves; the other 68 bytes (controls, space, 0x7F-0xA0,
    0xAD) are shifted to code points 256 and up, in byte order.
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


def _uses_byte_level(spec: dict) -> bool:
    """True when the tokenizer.json decodes with ByteLevel (directly or inside a Sequence)."""
    decoder = spec.get("decoder") or {}
    parts = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    if any(part.get("type") == "ByteLevel" for part in parts):
        return True
    pre = spec.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    return any(part.get("type") == "ByteLevel" for part in pres)


def open_tokenizer(tokenizer_json: Path) -> Any:
    """A `tokenizers.Tokenizer` of the file with its padding and truncation switched off (see above)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _real_ids(encoding: Any) -> list[int]:
    """The ids the encoding's own attention mask marks as real (padding never reaches a caller)."""
    return [i for i, real in zip(encoding.ids, encoding.attention_mask) if real]


class BundleTokenizer:
    """edgeopt.runtimes.base.Tokenizer over a tokenizer.json, plus the special ids a runtime reports.

    ``padding`` and ``truncation`` keep the file's own settings (None when it has none), for reports;
    they are not applied (module docstring)."""

    def __init__(self, tokenizer_json: Path) -> None:
        if not tokenizer_json.is_file():
            raise BundleError(f"tokenizer file {tokenizer_json} is missing",
                              "re-run edgeopt optimize; the bundle needs tokenizer/tokenizer.json")
        self._tok = open_tokenizer(tokenizer_json)
        self.directory = tokenizer_json.parent  # tokenizer_config.json, generation_config.json live beside it
        spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        self.padding: dict | None = spec.get("padding")
        self.truncation: dict | None = spec.get("truncation")
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(t["id"] for t in spec.get("added_tokens", []) if t.get("special"))
        self._bytes = self._build_byte_table(spec)
        self._control_texts = tuple(t["content"] for t in spec.get("added_tokens", []) if t.get("special"))
        self._control_ids = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", []) if t.get("special")}
        self._max_token_bytes = max_input_bytes_per_token(spec, self._bytes)
        self._plain_controls = self._control_texts_as_plain_text()
        self._plain_tok = None  # a twin that reads special-token text as plain text; built on first use
        self._plain_lock = threading.Lock()

    def _control_texts_as_plain_text(self) -> dict[str, list[int]]:
        """Each special token's text tokenized as characters. The server only ever needs these (a chat
        message's control text, cut out by edgeopt.server.chat.tokens), so they are computed once here,
        where nothing else uses the tokenizer yet and flipping its switch is safe."""
        before = self._tok.encode_special_tokens
        self._tok.encode_special_tokens = True
        try:
            return {t: self._tok.encode(t, add_special_tokens=False).ids for t in self._control_texts}
        finally:
            self._tok.encode_special_tokens = before

    def _build_byte_table(self, spec: dict) -> list[bytes]:
        # Pieces come from the already-parsed vocabulary and byte-level ones are mapped with str.translate:
        # one id_to_token call and one Python-level byte loop per token cost ~1 s of a cold start at 151k.
        byte_level = _uses_byte_level(spec)
        added = {t["id"]: t["content"] for t in spec.get("added_tokens", [])}
        pieces = _pieces_by_id(spec, self.vocab_size)
        table: list[bytes] = []
        for token_id, piece in enumerate(pieces):
            if piece is None:
                piece = self._tok.id_to_token(token_id)
            if piece is None or token_id in self.special_ids:
                table.append(b"")
            elif token_id in added:  # non-special added tokens are literal text
                table.append(added[token_id].encode("utf-8"))
            elif byte_level:  # a character that is not a byte's stand-in reads as "?"
                table.append(piece.translate(_byte_level_translation()).encode("latin-1", errors="replace"))
            else:
                table.append(_sentencepiece_bytes(piece))
        return table

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Tokenize. With ``parse_special``, special-token text (``<|im_start|>``) becomes the special token;
        without, it is tokenized as the plain characters it is (``add_special`` still adds BOS/EOS)."""
        if parse_special:
            return _real_ids(self._tok.encode(text, add_special_tokens=add_special))
        if not add_special and text in self._plain_controls:
            return list(self._plain_controls[text])
        return _real_ids(self._plain().encode(text, add_special_tokens=add_special))

    def _plain(self):  # noqa: ANN202 - tokenizers.Tokenizer, imported lazily
        # encode_special_tokens is a switch on the Tokenizer object, not a per-call argument: flipping it on
        # the shared instance would race with other threads' encodes, so a second instance carries it
        # (tens of MB for a 150k vocabulary: only built for arbitrary text, never by the server).
        with self._plain_lock:
            if self._plain_tok is None:
                from tokenizers import Tokenizer

                plain = Tokenizer.from_str(self._tok.to_str())
                plain.encode_special_tokens = True
                self._plain_tok = plain
            return self._plain_tok

    def control_token_texts(self) -> tuple[str, ...]:
        """Texts that become a special token when special tokens are parsed."""
        return self._control_texts

    def control_token_ids(self) -> dict[str, int]:
        return dict(self._control_ids)

    def max_token_bytes(self) -> int | None:
        """Most bytes of input text one token can stand for; None when the tokenizer gives no bound."""
        return self._max_token_bytes

    def encode_batch(self, texts: list[str], add_special: bool = True,
                     max_length: int | None = None) -> list[list[int]]:
        """Token ids of each text, unpadded; with ``max_length``, cut as transformers' truncation does:
        the text's tokens are cut from the right so that they *and* the special tokens fit."""
        if max_length is None:
            return [_real_ids(enc) for enc in self._tok.encode_batch(texts, add_special_tokens=add_special)]
        specials = self._tok.num_special_tokens_to_add(False) if add_special else 0
        if max_length <= specials:
            raise ConfigError(f"max_length {max_length} leaves no room beside {specials} special tokens",
                              "use a larger max_seq_length")
        out = []
        for enc in self._tok.encode_batch(texts, add_special_tokens=False):
            enc.truncate(max_length - specials)  # the overflow is kept aside by tokenizers; dropped here
            out.append(_real_ids(self._tok.post_process(enc, add_special_tokens=add_special)))
        return out

    def decode(self, token_ids: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in token_ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        if 0 <= token_id < len(self._bytes):
            return self._bytes[token_id]
        return b""

    def token_id(self, text: str) -> int | None:
        return self._tok.token_to_id(text)


def _pieces_by_id(spec: dict, size: int) -> list[str | None]:
    """The model's vocabulary strings by id, read from tokenizer.json (None where it has none: added tokens)."""
    vocab = (spec.get("model") or {}).get("vocab")
    pieces: list[str | None] = [None] * size
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: piece -> id
        for piece, token_id in vocab.items():
            if 0 <= token_id < size:
                pieces[token_id] = piece
    elif isinstance(vocab, list):  # Unigram: [piece, score] in id order
        for token_id, entry in enumerate(vocab[:size]):
            pieces[token_id] = entry[0]
    return pieces


@functools.cache
def _byte_level_translation() -> dict[int, str]:
    """str.translate table: each byte's stand-in character -> the latin-1 character of that byte; the
    other latin-1 characters -> "?" (characters above U+00FF become "?" when encoded)."""
    table = {code: "?" for code in range(256)}
    table.update({ord(stand_in): chr(byte) for stand_in, byte in byte_level_decoder_table().items()})
    return table


def _sentencepiece_bytes(piece: str) -> bytes:
    """SentencePiece conventions: "<0xNN>" is one raw byte, "▁" is a space."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            pass
    return piece.replace("\u2581", " ").encode("utf-8")


def eos_token_ids(config: dict[str, Any], generation_config: dict[str, Any], tokenizer_config: dict[str, Any],
                  tokenizer: BundleTokenizer) -> frozenset[int]:
    """Every id that ends a generation: config.json's and generation_config.json's ``eos_token_id`` (an int or
    a list: Llama 3 Instruct lists <|end_of_text|>, <|eom_id|>, <|eot_id|>) plus the tokenizer's
    ``eos_token``. The last matters for chat fine-tunes whose tokenizer_config names the end-of-turn token
    (<|im_end|>) while config.json still names the base model's <|endoftext|>: llama.cpp stops at the
    tokenizer's EOS, and so must every runtime, or a chat reply runs on into the next turn."""
    ids: set[int] = set()
    for source in (config, generation_config):
        value = source.get("eos_token_id")
        ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    eos = tokenizer_config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    eos_id = tokenizer.token_id(eos) if isinstance(eos, str) else None
    if eos_id is not None:
        ids.add(eos_id)
    return frozenset(int(i) for i in ids)
