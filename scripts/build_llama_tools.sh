#!/usr/bin/env bash
# Build llama.cpp's quality tools (llama-quantize, llama-imatrix, llama-perplexity) from the llama.cpp
# sources vendored in llama-cpp-python's source distribution, at the exact version installed in the
# current Python environment, as scripts/build_llama_server.sh builds llama-server. They are the anchor
# the quality benchmark (tests/bench/bench_quality_gguf.py) measures edgeopt against; not part of edgeopt.
#
# Usage: scripts/build_llama_tools.sh [PYTHON]
#   PYTHON                 interpreter whose llama-cpp-python version is matched (default: python3)
#   EDGEOPT_LLAMA_SDIST    an already unpacked sdist directory (skips `pip download`)
#   EDGEOPT_CACHE          cache root (default: ~/.cache/edgeopt)
#   JOBS                   parallel compile jobs (default: 2)
# Prints the directory holding the three binaries on its last line of stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/llama_sdist.sh"

python="${1:-python3}"
version="$("$python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
cache_root="${EDGEOPT_CACHE:-$HOME/.cache/edgeopt}"
out_dir="$cache_root/llama-tools-$version"
bin_dir="$out_dir/build/bin"
tools=(llama-quantize llama-imatrix llama-perplexity)

built=1
for tool in "${tools[@]}"; do [[ -x "$bin_dir/$tool" ]] || built=0; done
if [[ $built == 1 ]]; then
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$out_dir"
llama_src="$(llama_cpp_sources "$python" "$version" "$cache_root")"
if [[ ! -d "$llama_src/tools/imatrix" || ! -d "$llama_src/tools/perplexity" || ! -d "$llama_src/tools/quantize" ]]; then
    echo "error: no llama.cpp tool sources (tools/imatrix, tools/perplexity, tools/quantize) under $llama_src" >&2
    exit 1
fi

# Same build type and CPU flags as llama-cpp-python's own build (Release, GGML_NATIVE default), so the
# tools compute what the library edgeopt quantizes and serves with computes; nothing reaches the network.
cmake -S "$llama_src" -B "$out_dir/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
cmake --build "$out_dir/build" --target "${tools[@]}" -j "${JOBS:-2}" >&2
echo "$bin_dir"
