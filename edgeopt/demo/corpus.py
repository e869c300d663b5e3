"""Training and evaluation text that exists on every machine: the standard library's own docs.

pydoc renders the documentation of stdlib modules to plain text; the list and order are fixed, so
the corpus (and everything trained on it) is deterministic for a given Python version. Two things in
pydoc's output are not: object reprs carry memory addresses (``<object object at 0x7f...>``, which
change with every process because of ASLR) and the FILE section names the install path. Both are
normalised away so the corpus hash, and with it the demo model's cache key, is stable.
"""

from __future__ import annotations

import functools
import pydoc
import re

CORPUS_MODULES = (
    "json", "collections", "itertools", "functools", "pathlib", "string", "textwrap", "re", "heapq",
    "bisect", "datetime", "calendar", "fractions", "decimal", "statistics", "random", "csv", "shutil",
    "argparse", "logging", "contextlib", "dataclasses", "enum", "typing", "abc", "copy", "pprint",
    "difflib", "fnmatch", "glob", "tempfile", "zipfile", "tarfile", "gzip", "hashlib", "hmac", "base64",
    "struct", "codecs", "unicodedata", "locale", "gettext", "operator", "inspect", "ast", "dis", "tokenize",
    "keyword", "queue", "threading", "sched", "selectors", "socket", "ssl", "email", "http", "urllib",
    "html", "xml", "sqlite3", "pickle", "shelve", "configparser", "secrets", "uuid", "math", "cmath",
)

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_FILE_SECTION = re.compile(r"\nFILE\n    [^\n]*\n")


@functools.lru_cache(maxsize=None)  # rendering all modules takes seconds; a build needs them twice
def render_module(name: str) -> str:
    """pydoc plain text of one module, with process- and install-specific details removed."""
    module = __import__(name)
    text = pydoc.render_doc(module, renderer=pydoc.plaintext)
    text = _ADDRESS.sub("", text)
    return _FILE_SECTION.sub("\n", text)


def stdlib_documents(max_chars: int | None = None) -> list[tuple[str, str]]:
    """(module name, rendered docs) for each CORPUS_MODULES entry this Python has, in fixed order.

    With ``max_chars``, stops after the first module that reaches it (whole modules only).
    """
    documents: list[tuple[str, str]] = []
    total = 0
    for name in CORPUS_MODULES:
        try:
            documents.append((name, render_module(name)))
        except Exception:  # a module missing from a trimmed Python build is skipped, not fatal
            continue
        total += len(documents[-1][1])
        if max_chars is not None and total >= max_chars:
            break
    return documents


def stdlib_text(max_chars: int | None = None) -> str:
    """Concatenated plain-text docs of CORPUS_MODULES, cut at ``max_chars``."""
    parts: list[str] = []
    total = 0
    for name in CORPUS_MODULES:
        try:
            text = render_module(name)
        except Exception:  # a module missing from a trimmed Python build is skipped, not fatal
            continue
        parts.append(text)
        total += len(text)
        if max_chars is not None and total >= max_chars:
            break
    joined = "\n\n".join(parts)
    return joined[:max_chars] if max_chars is not None else joined
