#!/usr/bin/env bash
# Build edgeopt's RPC worker (scripts/rpc_worker: llama.cpp's RPC server with a memory cap) and
# libggml-rpc.so (the RPC backend the head loads beside llama-cpp-python's ggml) from the llama.cpp
# sources vendored in llama-cpp-python's source distribution, at the exact version installed in the
# current Python environment: head and workers then speak one RPC protocol version. Built once per
# version into the cache; a second run finds the binaries and builds nothing.
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
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/llama_sdist.sh"

python="${1:-python3}"
shift || true
extra_targets=("$@")
version="$("$python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
cache_root="${EDGEOPT_CACHE:-$HOME/.cache/edgeopt}"
out_dir="$cache_root/rpc-worker-$version"
bin_dir="$out_dir/build/bin"

targets=(edgeopt-rpc-worker ggml-rpc "${extra_targets[@]}")
built=1
[[ -x "$bin_dir/edgeopt-rpc-worker" && -f "$bin_dir/libggml-rpc.so" ]] || built=0
for target in "${extra_targets[@]}"; do [[ -x "$bin_dir/$target" ]] || built=0; done
if [[ $built == 1 ]]; then
    echo "$bin_dir"
    exit 0
fi

# The worker serves the device's accelerator when its backend is built in (scripts/rpc_worker/worker.cpp).
if [[ -z "${EDGEOPT_RPC_CMAKE_ARGS+set}" ]]; then
    source "$here/rpc_backend_args.sh"
    EDGEOPT_RPC_CMAKE_ARGS="$(rpc_backend_args)"
    [[ -n "$EDGEOPT_RPC_CMAKE_ARGS" && -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
fi

mkdir -p "$out_dir"
llama_src="$(llama_cpp_sources "$python" "$version" "$cache_root")"
# Release and GGML_NATIVE as llama-cpp-python builds; nothing that reaches the network. GGML_CUDA=OFF unless the
# arguments turn it on (a later -D wins): a build directory configured before keeps no stale choice.
# shellcheck disable=SC2086
cmake -S "$here/rpc_worker" -B "$out_dir/build" -G Ninja \
    -DLLAMA_SRC="$llama_src" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_RPC_RDMA=OFF \
    -DGGML_CUDA=OFF ${EDGEOPT_RPC_CMAKE_ARGS} >&2
nice -n 10 cmake --build "$out_dir/build" --target "${targets[@]}" -j "${JOBS:-2}" >&2
echo "$bin_dir"
