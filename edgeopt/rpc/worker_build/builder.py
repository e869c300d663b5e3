"""Build the RPC worker and libggml-rpc.so once per llama-cpp-python version, into
``$EDGEOPT_CACHE`` (default ~/.cache/edgeopt)/rpc-worker-VERSION/build/bin.

A second call finds the binaries and builds nothing; two processes asking at once (a head and a worker started
together) build once, the second waiting on a lock. ``JOBS`` sets the parallel compile jobs (default 2: a
small board compiling ggml with more runs out of memory).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from edgeopt.errors import MissingDependencyError, NativeBuildError
from edgeopt.rpc.worker_build.run_logged import log_tail, run_logged
from edgeopt.rpc.worker_build.sources import llama_cpp_sources
from edgeopt.rpc.worker_build.toolchain import GgmlBuildBackend, Toolchain, choose_backend, find_toolchain

WORKER_BINARY = "edgeopt-rpc-worker"
RPC_LIBRARY = "libggml-rpc.so"
TARGETS = (WORKER_BINARY, "ggml-rpc")
NATIVE_DIR = Path(__file__).resolve().parent / "native"  # package data: the wheel carries it
NATIVE_FILES = ("CMakeLists.txt", "worker.cpp")
DEFAULT_JOBS = "2"
# Release and GGML_NATIVE as llama-cpp-python builds; nothing that reaches the network. GGML_CUDA=OFF unless the
# backend's arguments turn it on (a later -D wins): a build directory configured before keeps no stale choice.
CONFIGURE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_COMMON=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_RPC_RDMA=OFF",
    "-DGGML_CUDA=OFF",
)


def llama_cpp_python_version() -> str:
    return importlib.metadata.version("llama_cpp_python")


def cache_root() -> Path:
    return Path(os.environ.get("EDGEOPT_CACHE") or Path.home() / ".cache" / "edgeopt")


def bin_dir(version: str) -> Path:
    return cache_root() / f"rpc-worker-{version}" / "build" / "bin"


def is_built(bins: Path, extra_targets: Sequence[str] = ()) -> bool:
    return (os.access(bins / WORKER_BINARY, os.X_OK) and (bins / RPC_LIBRARY).is_file()
            and all(os.access(bins / target, os.X_OK) for target in extra_targets))


def ensure_built(extra_targets: Sequence[str] = ()) -> Path:
    """The directory holding the worker and libggml-rpc.so (and ``extra_targets`` of the same build, e.g.
    llama-server for the benchmarks), built first when they are not there."""
    version = llama_cpp_python_version()
    bins = bin_dir(version)
    if is_built(bins, extra_targets):
        return bins
    cache_root().mkdir(parents=True, exist_ok=True)
    with _exclusive(cache_root() / f".rpc-worker-{version}.lock"):
        if not is_built(bins, extra_targets):  # another process may have built it while this one waited
            _build(version, bins.parent, (*TARGETS, *extra_targets))
    return bins


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """flock: the kernel drops it when the holder dies, so an interrupted build blocks nobody."""
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("edgeopt: another process is building the RPC worker; waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_native_sources() -> None:
    missing = [name for name in NATIVE_FILES if not (NATIVE_DIR / name).is_file()]
    if missing:
        raise MissingDependencyError(f"this edgeopt install lacks the RPC worker's sources {missing} in {NATIVE_DIR}",
                                     "reinstall edgeopt (pip install --force-reinstall edgeopt): its wheel carries them")


def _forget_other_configuration(build: Path) -> None:
    """A build directory configured from another source directory (the worker's sources moved from scripts/ into
    the package; a wheel install and a clone differ) or for another generator makes cmake refuse to configure:
    drop that configuration. The compiled objects stay, and ninja reuses those whose commands did not change."""
    cache = build / "CMakeCache.txt"
    if not cache.is_file():
        return
    entries = dict(line.split("=", 1) for line in cache.read_text(errors="replace").splitlines()
                   if "=" in line and not line.startswith(("//", "#")))
    if (entries.get("CMAKE_HOME_DIRECTORY:INTERNAL") != str(NATIVE_DIR)
            or entries.get("CMAKE_GENERATOR:INTERNAL") != "Ninja"):
        cache.unlink()
        shutil.rmtree(build / "CMakeFiles", ignore_errors=True)


def _environment(backend: GgmlBuildBackend) -> dict[str, str]:
    env = dict(os.environ)
    if backend.path_prefix:
        env["PATH"] = os.pathsep.join((*backend.path_prefix, env.get("PATH", "")))
    return env


def _commands(tools: Toolchain, backend: GgmlBuildBackend, source: Path, build: Path,
              targets: Sequence[str], jobs: str) -> tuple[list[str], list[str]]:
    configure = [tools.cmake, "-S", str(NATIVE_DIR), "-B", str(build), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={tools.ninja}", f"-DLLAMA_SRC={source}", *CONFIGURE_OPTIONS,
                 *backend.cmake_args]
    compile_ = [tools.cmake, "--build", str(build), "--target", *targets, "-j", jobs]
    return configure, compile_


def _build(version: str, build: Path, targets: Sequence[str]) -> None:
    _check_native_sources()
    tools = find_toolchain()  # before the download: a machine that cannot build learns it at once
    backend = choose_backend()
    source = llama_cpp_sources(version, cache_root())
    build.mkdir(parents=True, exist_ok=True)
    _forget_other_configuration(build)
    jobs = os.environ.get("JOBS") or DEFAULT_JOBS
    log_path = build.parent / "build.log"
    print(f"edgeopt: building the RPC worker for llama-cpp-python {version} into {build / 'bin'}: once per version, "
          f"a few minutes ({jobs} compile jobs; JOBS=N for more); log: {log_path}", file=sys.stderr, flush=True)
    started = time.monotonic()
    env = _environment(backend)
    configure, compile_ = _commands(tools, backend, source, build, targets, jobs)
    with log_path.open("wb") as log:
        for step, command, background in (("configuring", configure, False), ("compiling", compile_, True)):
            status = run_logged(command, log, env, f"RPC worker: {step}", background=background)
            if status != 0:
                log.flush()
                raise NativeBuildError(
                    f"building the RPC worker failed while {step} (exit status {status}); the end of {log_path}:\n"
                    f"{log_tail(log_path)}",
                    "the log names the cause (a compiler too old for llama.cpp, or out of memory: JOBS=1); fix it "
                    "and run again (the build resumes), or build on another machine of the same kind and point "
                    "EDGEOPT_RPC_BUILD at its build/bin directory")
    print(f"edgeopt: RPC worker built in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
