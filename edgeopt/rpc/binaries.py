"""Where the RPC build lives: the worker binary and libggml-rpc.so of scripts/build_rpc_worker.sh.

Both come from the llama.cpp sources of the installed llama-cpp-python, built once per version into
``$EDGEOPT_CACHE`` (default ~/.cache/edgeopt)/rpc-worker-VERSION/build/bin; ``EDGEOPT_RPC_BUILD`` names
another directory holding them (a build made for a board's GPU, say). Nothing is downloaded here.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import subprocess
from pathlib import Path

from edgeopt.errors import MissingDependencyError
from edgeopt.rpc.protocol import ProtocolVersion

WORKER_BINARY = "edgeopt-rpc-worker"
RPC_LIBRARY = "libggml-rpc.so"
BUILD_COMMAND = "`make rpc-worker` (or `scripts/build_rpc_worker.sh .venv/bin/python`)"


def llama_cpp_python_version() -> str:
    return importlib.metadata.version("llama_cpp_python")


def build_dir() -> Path:
    explicit = os.environ.get("EDGEOPT_RPC_BUILD")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("EDGEOPT_CACHE") or Path.home() / ".cache" / "edgeopt")
    return cache / f"rpc-worker-{llama_cpp_python_version()}" / "build" / "bin"


def _built(name: str) -> Path:
    path = build_dir() / name
    if not path.is_file():
        raise MissingDependencyError(
            f"{name} is not built for llama-cpp-python {llama_cpp_python_version()} (looked in {path.parent})",
            f"build it once with {BUILD_COMMAND}, or point EDGEOPT_RPC_BUILD at a directory holding it")
    return path


def worker_binary() -> Path:
    return _built(WORKER_BINARY)


def rpc_library() -> Path:
    return _built(RPC_LIBRARY)


@functools.cache
def head_protocol_version() -> ProtocolVersion:
    """The RPC protocol version of this build (the head's libggml-rpc.so and the worker come from one build)."""
    output = subprocess.run([str(worker_binary()), "--protocol-version"], capture_output=True, text=True,
                            timeout=30, check=True).stdout.strip()
    major, minor, patch = (int(part) for part in output.split("."))
    return ProtocolVersion(major, minor, patch)
