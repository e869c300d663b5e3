"""How many bytes of input text one token of a tokenizer.json can stand for, at most.

The server refuses a prompt before tokenizing it when its bytes alone prove it cannot fit the context:
a text of B bytes is at least ceil(B / N) tokens when no token covers more than N input bytes. N is the
longest token (its raw bytes; a special token's text counts, since parsed specials cover their text),
times how much the normalizer may shrink the text first. Anything that can *drop* input (a pre-tokenizer
that removes whitespace, a normalizer that strips accents or collapses spaces, a model that fuses or
drops unknown characters) gives no bound: None, and only the exact count after tokenizing decides.
"""

from __future__ import annotations

from typing import Any

UTF8_CHAR_MAX = 4  # an unknown character becomes one <unk>: at most 4 bytes of UTF-8
# Unicode composition shrinks UTF-8 by at most 3x (a Hangul syllable from three 3-byte jamo); lowercasing
# by at most 3x too (KELVIN SIGN, 3 bytes -> "k", 1 byte). Decomposition and prefixing only grow text.
_NORMALIZER_SHRINK = {"NFC": 3, "NFKC": 3, "Lowercase": 3, "NFD": 1, "NFKD": 1, "Prepend": 1}
# Pre-tokenizers that split but keep every character ("Split" too, unless its behaviour removes matches).
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "Split"}


def max_input_bytes_per_token(spec: dict[str, Any], token_bytes: list[bytes]) -> int | None:
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not _keeps_unknown_characters(spec, model):
        return None  # Unigram/WordPiece/WordLevel fold a whole run of unknown text into one token
    if not _keeps_every_character(spec.get("pre_tokenizer")):
        return None
    shrink = _normalizer_shrink(spec.get("normalizer"))
    if shrink is None:
        return None
    specials = [len(str(t.get("content", "")).encode("utf-8")) for t in spec.get("added_tokens", [])]
    longest = max([UTF8_CHAR_MAX, *map(len, token_bytes), *specials])
    return longest * shrink


def _keeps_unknown_characters(spec: dict[str, Any], model: dict[str, Any]) -> bool:
    """Every input byte ends up in some token: byte-level alphabets, byte fallback, or one <unk> per char."""
    pre = spec.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if any(p.get("type") == "ByteLevel" for p in pres) or model.get("byte_fallback"):
        return True
    return bool(model.get("unk_token")) and not model.get("fuse_unk")


def _keeps_every_character(pre: dict[str, Any] | None) -> bool:
    if not pre:
        return True
    if pre.get("type") == "Sequence":
        return all(_keeps_every_character(p) for p in pre.get("pretokenizers", []))
    return pre.get("type") in _KEEPING_PRE_TOKENIZERS and pre.get("behavior") != "Removed"


def _normalizer_shrink(normalizer: dict[str, Any] | None) -> int | None:
    """Factor by which the normalizer can shorten text in UTF-8 bytes; None when it can delete text."""
    if not normalizer:
        return 1
    kind = normalizer.get("type")
    if kind == "Sequence":
        factor = 1
        for part in normalizer.get("normalizers", []):
            part_factor = _normalizer_shrink(part)
            if part_factor is None:
                return None
            factor *= part_factor
        return factor
    if kind == "Replace":
        pattern = (normalizer.get("pattern") or {}).get("String")
        content = normalizer.get("content", "")
        fits = pattern is not None and len(content.encode("utf-8")) >= len(pattern.encode("utf-8"))
        return 1 if fits else None  # a regex, or a replacement shorter than what it replaces
    return _NORMALIZER_SHRINK.get(kind)
