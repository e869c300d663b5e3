"""What the worker's build needs from the machine (cmake, ninja, a C/C++ compiler) and which llama.cpp backend it
gets (CUDA where CUDA's compiler and a GPU are both there, else the CPU).

edgeopt depends on the cmake and ninja wheels, so ``pip install edgeopt`` brings both; the compiler is the
machine's (llama-cpp-python's own source build needs it too). A cmake or ninja on the PATH wins: it is the one
the user chose, and the one the existing build directories were configured with.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import MissingDependencyError

CUDA_BIN = Path("/usr/local/cuda/bin")
COMPILERS = {"CC": ("cc", "gcc", "clang"), "CXX": ("c++", "g++", "clang++")}
APT_HINT = "Debian, Ubuntu, Raspberry Pi OS: sudo apt install build-essential"


@dataclass(frozen=True)
class Toolchain:
    cmake: str
    ninja: str


@dataclass(frozen=True)
class GgmlBuildBackend:
    cmake_args: tuple[str, ...] = ()
    path_prefix: tuple[str, ...] = ()  # directories the build needs first on the PATH (nvcc's)


def find_program(name: str, path: str | None = None) -> str | None:
    """On the PATH, else in this interpreter's scripts directory: pip installs cmake and ninja there, and an
    environment used without activating it (``.venv/bin/edgeopt worker``) does not have it on the PATH."""
    return shutil.which(name, path=path) or shutil.which(name, path=sysconfig.get_path("scripts"))


def _compiler_found(variable: str) -> bool:
    chosen = os.environ.get(variable, "").strip()
    names = (shlex.split(chosen)[0],) if chosen else COMPILERS[variable]
    return any(shutil.which(name) or Path(name).is_file() for name in names)


def find_toolchain() -> Toolchain:
    """Raises MissingDependencyError naming every missing tool and how to install each."""
    cmake, ninja = find_program("cmake"), find_program("ninja")
    missing, fixes = [], []
    if cmake is None or ninja is None:
        missing += [name for name, found in (("cmake", cmake), ("ninja", ninja)) if found is None]
        fixes.append(f"`{sys.executable} -m pip install cmake ninja` (both edgeopt dependencies) or "
                     "`sudo apt install cmake ninja-build`")
    if not (_compiler_found("CC") and _compiler_found("CXX")):
        missing.append("a C/C++ compiler (cc and c++, or $CC and $CXX)")
        fixes.append(f"install a C/C++ compiler ({APT_HINT})")
    if missing:
        raise MissingDependencyError(
            f"building edgeopt's RPC worker needs {', '.join(missing)}: not found on the PATH "
            f"nor in {sysconfig.get_path('scripts')}",
            f"{'; '.join(fixes)}; or build it on another machine of the same kind and point EDGEOPT_RPC_BUILD at "
            "its build/bin directory")
    assert cmake is not None and ninja is not None
    return Toolchain(cmake=cmake, ninja=ninja)


def gpu_visible(path: str | None = None) -> bool:
    """A GPU the build can see: CUDA's compiler alone is not enough (a CI or build machine may carry the toolkit
    without a GPU, and ggml's native CUDA architecture detection then fails the configure step)."""
    if Path("/etc/nv_tegra_release").exists():  # a Jetson (older JetPacks have no nvidia-smi)
        return True
    nvidia_smi = shutil.which("nvidia-smi", path=path)
    if nvidia_smi is None:
        return False
    try:
        listing = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    from edgeopt.profiles.platform import nvidia_smi_lists_a_gpu

    return nvidia_smi_lists_a_gpu(listing)


def choose_backend(path: str | None = None) -> GgmlBuildBackend:
    """EDGEOPT_RPC_CMAKE_ARGS when set (even empty: the user chose); else the CUDA backend where nvcc (on the PATH
    or in /usr/local/cuda/bin) and a GPU are both there, so the worker serves the GPU. Says why on stderr."""
    chosen = os.environ.get("EDGEOPT_RPC_CMAKE_ARGS")
    if chosen is not None:
        return GgmlBuildBackend(tuple(shlex.split(chosen)))
    nvcc_on_path = shutil.which("nvcc", path=path) is not None
    if not nvcc_on_path and not os.access(CUDA_BIN / "nvcc", os.X_OK):
        return GgmlBuildBackend()
    if not gpu_visible(path):
        print("build_rpc_worker: CUDA's compiler found but no GPU (nvidia-smi -L lists none): building the worker "
              "for the CPU (EDGEOPT_RPC_CMAKE_ARGS=\"-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=<arch>\" builds it "
              "for a GPU elsewhere)", file=sys.stderr)
        return GgmlBuildBackend()
    print("build_rpc_worker: CUDA's compiler and a GPU found: building the worker with the CUDA backend "
          "(EDGEOPT_RPC_CMAKE_ARGS= builds it for the CPU only)", file=sys.stderr)
    return GgmlBuildBackend(("-DGGML_CUDA=ON",), () if nvcc_on_path else (str(CUDA_BIN),))
