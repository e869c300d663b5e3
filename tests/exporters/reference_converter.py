"""llama.cpp's own HF->GGUF converter, run as a test oracle (never imported by the product).

``make setup`` unpacks it from llama-cpp-python's sdist (scripts/fetch_reference_converter.py) into
the virtual environment. Tests find it here; when it is missing they fail and name the command that
fetches it, because a conformance test that skips itself would pass without checking anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = ".complete-with-templates"  # scripts/fetch_reference_converter.py writes it last
FETCH_COMMAND = f"make setup  (or: {Path(sys.executable).name} scripts/fetch_reference_converter.py)"


def reference_root() -> Path:
    """The unpacked ``vendor/llama.cpp`` tree matching the installed llama-cpp-python."""
    root = Path(sys.prefix) / "share" / "edgeopt" / f"llama.cpp-{version('llama-cpp-python')}"
    if not (root / MARKER).is_file() or not (root / "convert_hf_to_gguf.py").is_file():
        pytest.fail(f"llama.cpp's reference converter is not in {root}; fetch it with: {FETCH_COMMAND}",
                    pytrace=False)
    return root


def reference_vocab(name: str) -> Path:
    """One of llama.cpp's tokenizer test vocabularies, e.g. ``reference_vocab("llama-bpe")``."""
    path = reference_root() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.fail(f"{path} is missing; the fetch script's VOCABS must list {name!r}", pytrace=False)
    return path


def reference_chat_template(name: str) -> str:
    """The text of one of llama.cpp's real chat templates, e.g. ``reference_chat_template(
    "Qwen-Qwen2.5-7B-Instruct")`` (the file ``models/templates/<name>.jinja``)."""
    path = reference_root() / "models" / "templates" / f"{name}.jinja"
    if not path.is_file():
        pytest.fail(f"{path} is missing; llama.cpp of this llama-cpp-python has no template {name!r}", pytrace=False)
    return path.read_text()


def convert_with_reference(model_dir: Path, out_path: Path, outtype: str = "f32") -> Path:
    """Run ``convert_hf_to_gguf.py model_dir --outtype OUTTYPE --outfile out_path``; return out_path.

    It runs in a subprocess with its own gguf-py first on the path (the script inserts it), offline,
    so the installed gguf package and ours never mix with the oracle's.
    """
    root = reference_root()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(root)}
    env.pop("NO_LOCAL_GGUF", None)
    command = [sys.executable, str(root / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", outtype,
               "--outfile", str(out_path)]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise AssertionError(f"reference converter failed on {model_dir} (exit {done.returncode}):\n{tail}")
    return out_path
