"""What the llama.cpp tokenizer needs from one pass over a vocabulary, made once per GGUF file.

The pass (control tokens by text, the most bytes one token spans, the end-of-generation tokens) calls into
llama.cpp three times per token: 1.4 s of CPU for Gemma 3's 262k tokens on a 2-core EPYC, a third of that
server's start. Where the file is known, the most bytes a token spans is bounded by its longest token text in
the file (read with the header: a piece is never longer than its stored text, whose byte-level BPE characters
and SentencePiece spaces and <0x..> tokens only shrink when decoded), so only control tokens are turned into
text: 0.7 s. Even so a scan is kept in memory for the files loaded lately (a server swapping models reloads
the same GGUFs) and on disk under the user cache (``$EDGEOPT_CACHE/vocab``), keyed by the file's path, size
and modification time and by the llama.cpp build: a later start reads it in milliseconds. A file that
changed is scanned again; an unreadable cache entry is scanned again and rewritten.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from edgeopt.errors import EdgeoptError

log = logging.getLogger(__name__)

PIECE_BUFFER = 256
FORMAT = 2  # of the files on disk: a change of the scan's content changes it (2: longest from the file)
# Tokens llama.cpp turns from text into ids only when asked to parse special tokens.
_PARSED_ONLY_WHEN_SPECIAL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN


@dataclass(frozen=True)
class Control:
    token_id: int
    lstrip: bool  # llama.cpp drops whitespace before the token
    rstrip: bool  # ... and after it


@dataclass(frozen=True)
class VocabScan:
    controls: dict[str, Control]  # control-token text -> its token (read only once made)
    longest: int  # the most bytes one token's text spans
    eog: frozenset[int]


def scan_vocab(vocab: llama_cpp.llama_vocab_p, longest_text: int | None = None) -> VocabScan:
    """One pass over the vocabulary: control tokens by text, the most bytes one token's text spans (control
    text included), and the end-of-generation tokens. ``longest_text``: the file's longest token text in bytes,
    which bounds the second (else every token's text is made to measure it)."""
    controls: dict[str, Control] = {}
    longest = longest_text or 0
    eog: set[int] = set()
    buffer = ctypes.create_string_buffer(PIECE_BUFFER)
    for token_id in range(int(llama_cpp.llama_vocab_n_tokens(vocab))):
        if llama_cpp.llama_vocab_is_eog(vocab, token_id):
            eog.add(token_id)
        attr = int(llama_cpp.llama_vocab_get_attr(vocab, token_id))
        if longest_text is not None and not attr & _PARSED_ONLY_WHEN_SPECIAL:
            continue
        n = llama_cpp.llama_token_to_piece(vocab, token_id, buffer, PIECE_BUFFER, 0, True)
        longest = max(longest, abs(n))  # negative: the piece needs -n bytes (longer than the buffer)
        if attr & _PARSED_ONLY_WHEN_SPECIAL and n != 0:
            text = _special_piece(vocab, token_id, buffer, n).decode("utf-8", errors="replace")
            controls.setdefault(text, Control(token_id, bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                                              bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP)))
    return VocabScan(controls, longest, frozenset(eog))


def _special_piece(vocab: llama_cpp.llama_vocab_p, token_id: int, buffer: ctypes.Array, n: int) -> bytes:
    if n > 0:
        return buffer.raw[:n]
    big = ctypes.create_string_buffer(-n)  # a rare control text longer than the scan's buffer
    return big.raw[:llama_cpp.llama_token_to_piece(vocab, token_id, big, -n, 0, True)]


class _ScanCache:
    """Scans of the files loaded lately, by file identity."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._scans: OrderedDict[Hashable, VocabScan] = OrderedDict()
        self._lock = threading.Lock()  # models load in worker threads

    def get(self, key: Hashable) -> VocabScan | None:
        with self._lock:
            scan = self._scans.get(key)
            if scan is not None:
                self._scans.move_to_end(key)
            return scan

    def put(self, key: Hashable, scan: VocabScan) -> None:
        with self._lock:
            self._scans[key] = scan
            while len(self._scans) > self._entries:
                self._scans.popitem(last=False)


_SCANS = _ScanCache(entries=16)


def cached_scan(vocab: llama_cpp.llama_vocab_p, file_key: Hashable | None) -> VocabScan:
    """The scan of ``vocab``, from memory or disk when ``file_key`` (path, size, mtime) names its file;
    None scans every time (a vocabulary whose file is not known)."""
    if file_key is None:
        return scan_vocab(vocab)
    scan = _SCANS.get(file_key)
    if scan is None:
        path = _scan_file(file_key)
        scan = _read(path)
        if scan is None:
            scan = scan_vocab(vocab, _longest_token_text(file_key))
            _write(path, scan)
        _SCANS.put(file_key, scan)
    return scan


def _longest_token_text(file_key: Hashable) -> int | None:
    """The longest token text in bytes of the GGUF that ``file_key`` (path, size, mtime) names, from its header
    (read once per file for serving anyway); None when it cannot be read."""
    from edgeopt.sources.gguf_model import gguf_metadata

    if not isinstance(file_key, tuple) or not file_key or not isinstance(file_key[0], str):
        return None
    try:
        tokens = gguf_metadata(Path(file_key[0])).arrays.get("tokenizer.ggml.tokens")
    except EdgeoptError:
        return None
    return tokens.longest if tokens is not None and tokens.longest > 0 else None


def _scan_file(file_key: Hashable) -> Path:
    from edgeopt.store.cache import cache_root

    identity = json.dumps([FORMAT, list(file_key) if isinstance(file_key, tuple) else file_key,
                           llama_cpp.__version__], default=str)
    return cache_root() / "vocab" / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.json"


def _read(path: Path) -> VocabScan | None:
    try:
        data = json.loads(path.read_text())
        return VocabScan({text: Control(int(i), bool(ls), bool(rs)) for text, i, ls, rs in data["controls"]},
                         int(data["longest"]), frozenset(int(t) for t in data["eog"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: scan again
        log.warning("vocabulary scan cache %s unreadable (%s); scanning the vocabulary again", path, exc)
        return None


def _write(path: Path, scan: VocabScan) -> None:
    """Atomically (a concurrent start reads a whole file or none); a cache that cannot be written costs
    the next start its scan, nothing else."""
    data = {"controls": [[text, c.token_id, c.lstrip, c.rstrip] for text, c in scan.controls.items()],
            "longest": scan.longest, "eog": sorted(scan.eog)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump(data, out)
        os.replace(out.name, path)
    except OSError as exc:
        log.warning("could not save the vocabulary scan to %s (%s); the next start scans again", path, exc)
