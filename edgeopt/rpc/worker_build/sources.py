"""llama.cpp's sources for the worker's build: those vendored in the source distribution of the installed
llama-cpp-python, at its exact version (head and worker then speak one RPC protocol version).

Downloaded (pip, no binary) and unpacked once per version into CACHE/llama-cpp-python-sdist-VERSION, the
directory scripts/llama_sdist.sh shares with the benchmark builds; ``EDGEOPT_LLAMA_SDIST``, an already unpacked
sdist directory, skips the download (a machine without access to the package index).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from edgeopt.errors import MissingDependencyError

MARKER = Path("ggml") / "include" / "ggml-rpc.h"  # what the worker's CMakeLists checks LLAMA_SRC for
OUTPUT_TAIL_CHARS = 1500


def llama_cpp_sources(version: str, cache_root: Path) -> Path:
    """The llama.cpp source directory (vendor/llama.cpp of the sdist); downloads it on first use."""
    explicit = os.environ.get("EDGEOPT_LLAMA_SDIST")
    if explicit:
        sdist_dir = Path(explicit)
    else:
        sdist_dir = cache_root / f"llama-cpp-python-sdist-{version}" / f"llama_cpp_python-{version}"
        if not sdist_dir.is_dir():
            _download(version, sdist_dir)
    source = sdist_dir / "vendor" / "llama.cpp"
    if not (source / MARKER).is_file():
        raise MissingDependencyError(
            f"{sdist_dir} holds no llama.cpp sources ({source / MARKER} is missing)",
            f"point EDGEOPT_LLAMA_SDIST at the unpacked llama_cpp_python-{version}.tar.gz (its top directory)"
            if explicit else f"remove {sdist_dir.parent} (an incomplete download) and run again")
    return source


def _download(version: str, sdist_dir: Path) -> None:
    download_dir = sdist_dir.parent
    download_dir.mkdir(parents=True, exist_ok=True)
    print(f"edgeopt: fetching llama.cpp's sources (the llama-cpp-python {version} source distribution, ~75 MB) "
          f"into {download_dir}", file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
               "--no-binary", ":all:", "--dest", str(download_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(download_dir.glob(f"llama_cpp_python-{version}.tar.gz"))
    if result.returncode != 0 or not archives:
        output = (result.stdout + result.stderr).strip()[-OUTPUT_TAIL_CHARS:]
        raise MissingDependencyError(
            f"could not download the llama-cpp-python {version} source distribution, which the RPC worker is built "
            f"from (`{' '.join(command)}` exited {result.returncode}):\n{output}",
            "let pip reach the package index (a proxy: PIP_INDEX_URL), or fetch "
            f"llama_cpp_python-{version}.tar.gz elsewhere, unpack it and set EDGEOPT_LLAMA_SDIST to its top directory")
    _unpack(archives[0], sdist_dir)


def _unpack(archive: Path, sdist_dir: Path) -> None:
    """Unpack beside the final place, then rename: an interrupted unpack leaves no directory that looks complete."""
    with tempfile.TemporaryDirectory(dir=sdist_dir.parent, prefix=".unpacking-") as staging:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # refuses links and paths that leave the directory
                tar.extractall(staging, filter="data")
            else:
                tar.extractall(staging)  # noqa: S202 - Pythons without the filter; the archive is PyPI's sdist
        unpacked = Path(staging) / sdist_dir.name
        if not unpacked.is_dir():
            raise MissingDependencyError(f"{archive} does not unpack into {sdist_dir.name}/",
                                         f"remove {archive} and run again, or set EDGEOPT_LLAMA_SDIST")
        if sdist_dir.exists():  # another process unpacked it meanwhile
            return
        shutil.move(str(unpacked), str(sdist_dir))
