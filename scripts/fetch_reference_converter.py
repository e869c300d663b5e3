"""Fetch llama.cpp's own HF->GGUF converter as a *test oracle* (never part of the product).

llama-cpp-python's source distribution vendors the llama.cpp tree it was built from. We download
the sdist of exactly the installed llama-cpp-python version (so converter, gguf-py and the compiled
library agree), and unpack only what the tests use: ``convert_hf_to_gguf.py``, its ``conversion``
package, ``gguf-py``, a few of llama.cpp's tokenizer test vocabularies (``models/ggml-vocab-*``) and the
real chat templates llama.cpp tests its tool-call parsers with (``models/templates/*.jinja``: Qwen2.5,
Hermes, Llama 3.x, Mistral, ...), which the server's tool-calling tests render and parse.

The result lives in the virtual environment (``<venv>/share/edgeopt/llama.cpp-<version>``), outside
git, and is reused until the installed version changes. Run by ``make setup``; tests locate it with
``tests/exporters/reference_converter.py``. Usage: ``python scripts/fetch_reference_converter.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

# Tokenizer test vocabularies worth having: Llama 2 (SentencePiece, 32k), Llama 3 (byte-level BPE,
# 128k), Qwen2 (byte-level BPE, 151k), Phi-3 (SentencePiece); each with its .inp/.out test strings.
VOCABS = ("llama-spm", "llama-bpe", "qwen2", "phi-3")
# The marker names what the unpacked tree holds: a tree from an older version of this script (without
# models/templates) lacks this marker, so it is fetched again rather than reused incomplete.
MARKER = ".complete-with-templates"
LEGACY_MARKER = ".complete"


def oracle_dir() -> Path:
    """Where the oracle of the installed llama-cpp-python lives (also read by the tests' helper)."""
    return Path(sys.prefix) / "share" / "edgeopt" / f"llama.cpp-{version('llama-cpp-python')}"


def _wanted(member: str, root: str) -> str | None:
    """The path below vendor/llama.cpp/ of an sdist member to keep, or None."""
    prefix = f"{root}/vendor/llama.cpp/"
    if not member.startswith(prefix):
        return None
    rel = member[len(prefix):]
    if rel == "convert_hf_to_gguf.py" or rel.startswith(("conversion/", "gguf-py/gguf/")):
        return rel
    if any(rel.startswith(f"models/ggml-vocab-{name}.gguf") for name in VOCABS):
        return rel
    if rel.startswith("models/templates/") and rel.endswith(".jinja"):
        return rel
    return None


def _unpack(sdist: Path, dest: Path) -> int:
    root = sdist.name.removesuffix(".tar.gz")
    count = 0
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            rel = _wanted(member.name, root)
            if rel is None or not member.isfile():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as out:  # type: ignore[union-attr]
                shutil.copyfileobj(src, out)
            count += 1
    return count


def fetch(dest: Path) -> None:
    ver = version("llama-cpp-python")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={ver}", "--no-deps",
                        "--no-binary", ":all:", "-d", tmp, "-q"], check=True)
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        count = _unpack(sdist, partial)
        if not (partial / "convert_hf_to_gguf.py").is_file():
            raise SystemExit(f"{sdist.name} has no vendor/llama.cpp/convert_hf_to_gguf.py")
        if not any((partial / "models" / "templates").glob("*.jinja")):
            raise SystemExit(f"{sdist.name} has no vendor/llama.cpp/models/templates/*.jinja")
        for marker in (LEGACY_MARKER, MARKER):  # the legacy one keeps older checkouts' test helpers working
            (partial / marker).write_text(f"llama-cpp-python {ver}\n")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    print(f"reference converter: llama.cpp of llama-cpp-python {ver} ({count} files) in {dest} "
          f"after {time.perf_counter() - started:.0f}s")


def main() -> None:
    dest = oracle_dir()
    if (dest / MARKER).is_file():
        print(f"reference converter: already in {dest}")
        return
    fetch(dest)


if __name__ == "__main__":
    main()
