"""Where the RPC build lives: the worker binary and libggml-rpc.so, built from the llama.cpp sources of the
installed llama-cpp-python (edgeopt.rpc.worker_build).

Built once per version into ``$EDGEOPT_CACHE`` (default ~/.cache/edgeopt)/rpc-worker-VERSION/build/bin, on first
use when ``make rpc-worker`` has not built it ahead; ``EDGEOPT_RPC_BUILD`` names another directory holding them
(a build made for a board's GPU, say), and then nothing is built.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from edgeopt.errors import MissingDependencyError
from edgeopt.rpc.protocol import ProtocolVersion
from edgeopt.rpc.worker_build.builder import RPC_LIBRARY, WORKER_BINARY, bin_dir, ensure_built, llama_cpp_python_version


def build_dir() -> Path:
    """Where the binaries are (or will be once built); builds nothing."""
    explicit = os.environ.get("EDGEOPT_RPC_BUILD")
    return Path(explicit) if explicit else bin_dir(llama_cpp_python_version())


def _built(name: str) -> Path:
    explicit = os.environ.get("EDGEOPT_RPC_BUILD")
    path = (Path(explicit) if explicit else ensure_built()) / name
    if not path.is_file():
        raise MissingDependencyError(
            f"{name} is not in EDGEOPT_RPC_BUILD={explicit} (looked for {path})",
            "point EDGEOPT_RPC_BUILD at the build/bin directory of a worker build for llama-cpp-python "
            f"{llama_cpp_python_version()}, or unset it: edgeopt then builds one into ~/.cache/edgeopt on first use")
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
