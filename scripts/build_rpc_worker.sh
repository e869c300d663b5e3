#!/usr/bin/env bash
# Build edgeopt's RPC worker (edgeopt/rpc/worker_build/native: llama.cpp's RPC server with a memory cap) and
# libggml-rpc.so (the RPC backend the head loads beside llama-cpp-python's ggml) ahead of their first use, with the
# Python builder `edgeopt worker` runs on first use (edgeopt/rpc/worker_build): from the llama.cpp sources vendored
# in llama-cpp-python's source distribution, at the exact version installed in PYTHON's environment, so head and
# workers speak one RPC protocol version. Built once per version into the cache; a second run builds nothing.
#
# Usage: scripts/build_rpc_worker.sh [PYTHON] [EXTRA_TARGET...]
#   PYTHON                 interpreter whose llama-cpp-python version is matched (default: python3)
#   EXTRA_TARGET           more targets of the same build, e.g. llama-server (RPC-enabled, benchmark only)
#   EDGEOPT_LLAMA_SDIST    an already unpacked sdist directory (skips `pip download`)
#   EDGEOPT_CACHE          cache root (default: ~/.cache/edgeopt)
#   EDGEOPT_RPC_CMAKE_ARGS more cmake options; unset, a machine with CUDA's compiler (nvcc on PATH or in
#                          /usr/local/cuda/bin) and a GPU it can see (nvidia-smi lists one, or a Jetson) gets
#                          "-DGGML_CUDA=ON", so its worker serves the GPU; set it (even empty) to choose yourself
#   JOBS                   parallel compile jobs (default: 2)
# Prints the directory holding the binaries on its last line of stdout; the compiler's output goes to
# CACHE/rpc-worker-VERSION/build.log (its end is shown when the build fails).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:-python3}"
shift || true
# This clone's builder and C++ sources, whichever edgeopt PYTHON has installed (or none: only llama-cpp-python is needed).
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m edgeopt.rpc.worker_build "$@"
