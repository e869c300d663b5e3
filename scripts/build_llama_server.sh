#!/usr/bin/env bash
# Build llama-server from the llama.cpp sources vendored in llama-cpp-python's source
# distribution, at the exact version installed in the current Python environment, so the
# comparison benchmark (tests/bench/bench_vs_llama_server.py) runs the same llama.cpp code
# edgeopt serves with. Not part of the product: it only feeds benchmarks.
#
# Usage: scripts/build_llama_server.sh [PYTHON]
#   PYTHON                 interpreter whose llama-cpp-python version is matched (default: python3)
#   EDGEOPT_LLAMA_SDIST    an already unpacked sdist directory (skips `pip download`)
#   EDGEOPT_CACHE          cache root (default: ~/.cache/edgeopt)
#   JOBS                   parallel compile jobs (default: 2)
# Prints the path of the built binary on its last line of stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/llama_sdist.sh"

python="${1:-python3}"
version="$("$python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
cache_root="${EDGEOPT_CACHE:-$HOME/.cache/edgeopt}"
out_dir="$cache_root/llama-server-$version"
binary="$out_dir/build/bin/llama-server"

if [[ -x "$binary" ]]; then
    echo "$binary"
    exit 0
fi

mkdir -p "$out_dir"
llama_src="$(llama_cpp_sources "$python" "$version" "$cache_root")"
if [[ ! -f "$llama_src/tools/server/server.cpp" && ! -f "$llama_src/tools/server/main.cpp" ]]; then
    echo "error: no llama.cpp server sources under $llama_src" >&2
    exit 1
fi

# Same build type and CPU flags as llama-cpp-python's own build (Release, GGML_NATIVE default),
# and nothing that reaches the network: no curl/openssl, no prebuilt web UI download.
cmake -S "$llama_src" -B "$out_dir/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
nice -n 10 cmake --build "$out_dir/build" --target llama-server -j "${JOBS:-2}" >&2
echo "$binary"
