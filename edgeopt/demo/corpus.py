"""Training and evaluation text that exists on every machine: the standard library's own docs.

pydoc renders the documentation of stdlib modules to plain text; the list and order are fixed, so
the corpus (and everything trained on it) is deterministic for a given Python version. pydoc shows
module *state*, though: an object's repr carries its memory address (``<object object at 0x7f...>``,
new in every process), the FILE section names the install path, and module globals reflect what
the calling process did (pytest's logging handlers, ``tempfile.tempdir``, ``__slotnames__`` caches).
So the docs are rendered in a fresh, isolated interpreter (``-I -S``, fixed hash seed and locale)
that imports nothing but the module at hand, and addresses and paths are normalised away: the
corpus hash, and with it the demo model's cache key, is the same in a shell, in pytest and in CI.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

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

# Runs in the isolated interpreter: renders the named modules in order, stopping once max_chars is
# reached; a module missing from a trimmed Python build is skipped, not fatal.
_RENDER_SCRIPT = """
import json, pydoc, sys
max_chars, names = int(sys.argv[1]), sys.argv[2:]
rendered, total = [], 0
for name in names:
    try:
        text = pydoc.render_doc(__import__(name), renderer=pydoc.plaintext)
    except Exception:
        continue
    rendered.append([name, text])
    total += len(text)
    if 0 <= max_chars <= total:
        break
sys.stdout.write(json.dumps(rendered))
"""
_RENDER_ENV = {"PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}


def normalise(text: str) -> str:
    """Remove memory addresses and the install path from pydoc output."""
    return _FILE_SECTION.sub("\n", _ADDRESS.sub("", text))


def run_isolated(script: str, *args: str) -> str:
    """stdout of ``script`` run by a fresh interpreter that sees no site-packages and no caller state."""
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script, *args], capture_output=True,
                            env=_RENDER_ENV, check=True)
    return result.stdout.decode("utf-8")


@functools.lru_cache(maxsize=8)  # rendering takes seconds; a build and its cache key need it twice
def _render(max_chars: int) -> tuple[tuple[str, str], ...]:
    rendered = json.loads(run_isolated(_RENDER_SCRIPT, str(max_chars), *CORPUS_MODULES))
    return tuple((name, normalise(text)) for name, text in rendered)


def render_module(name: str) -> str:
    """pydoc plain text of one CORPUS_MODULES entry, as it appears in the corpus."""
    documents = dict(_render(-1))
    if name not in documents:
        raise KeyError(f"{name!r} is not in CORPUS_MODULES or does not import on this Python")
    return documents[name]


def stdlib_documents(max_chars: int | None = None) -> list[tuple[str, str]]:
    """(module name, rendered docs) for each CORPUS_MODULES entry this Python has, in fixed order.

    With ``max_chars``, stops after the first module that reaches it (whole modules only).
    """
    return list(_render(-1 if max_chars is None else max_chars))


def stdlib_text(max_chars: int | None = None) -> str:
    """Concatenated plain-text docs of CORPUS_MODULES, cut at ``max_chars``."""
    joined = "\n\n".join(text for _, text in stdlib_documents(max_chars))
    return joined[:max_chars] if max_chars is not None else joined
