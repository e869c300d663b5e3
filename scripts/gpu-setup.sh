#!/usr/bin/env bash
# Set up edgeopt's GPU path on an NVIDIA machine that has no network (issue 33): its own python3 brings
# torch (CUDA), transformers, onnxruntime, nvcc, cmake and ninja; everything else travels from a machine
# with PyPI access as files, and llama-cpp-python is compiled there with CUDA from its source distribution.
#
#   scripts/gpu-setup.sh prepare DIR    on a machine with PyPI: cp312 manylinux wheels of the packages the
#                                       GPU machine lacks, and llama-cpp-python's sdist (the version this
#                                       checkout's .venv runs), trimmed of what a CUDA build never reads
#                                       (llama.cpp's docs, vocab test models, other GPU backends), into DIR
#   scripts/gpu-setup.sh install DIR    on the GPU machine: install those wheels into $SITE (default
#                                       /tmp/site), build llama-cpp-python for CUDA (sm_$CUDA_ARCH, default 90)
#                                       unless DIR already holds such a wheel, and print what it got.
#                                       Afterwards: source $SITE/gpu-env.sh (PYTHONPATH, and
#                                       LD_LIBRARY_PATH so llama.cpp shares torch's CUDA libraries)
#
# Environment: PYTHON (default: python3), SITE, CUDA_ARCH, JOBS (default: all cores), LLAMA_VERSION
# (prepare: default the version in .venv). The built wheel is copied to $WHEEL_OUT when set, so a later
# session can carry it instead of compiling again (~5 min on 16 cores).
set -euo pipefail

mode="${1:?usage: gpu-setup.sh prepare|install DIR}"
dir="${2:?usage: gpu-setup.sh prepare|install DIR}"
python="${PYTHON:-python3}"
site="${SITE:-/tmp/site}"

# What the GPU image lacks of edgeopt's base and test dependencies with everything they require (the image's
# package list against the .venv's metadata), pinned to the versions the project's .venv resolved. torch, transformers, tokenizers, onnxruntime, numpy stay the image's.
PACKAGES=(gguf llguidance diskcache fastapi starlette opentelemetry-api pydantic pydantic_core annotated-types
          typing-inspection uvicorn httptools textual platformdirs mdit-py-plugins
          openai httpx2 httpcore2 truststore distro jiter sniffio jsonschema jsonschema-specifications referencing
          rpds-py pytest-asyncio optimum optimum-onnx)

prepare() {
    local venv_python="${VENV_PYTHON:-.venv/bin/python}"
    mkdir -p "$dir/whl"
    local version="${LLAMA_VERSION:-$("$venv_python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')}"
    local specs=()
    for name in "${PACKAGES[@]}"; do
        local v
        v="$("$venv_python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null || true)"
        specs+=("${name}${v:+==$v}")
    done
    "$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 -d "$dir/whl" "${specs[@]}"
    local tmp
    tmp="$(mktemp -d)"
    "$python" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
    tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
    local top="$tmp/llama_cpp_python-$version"
    local src="$top/vendor/llama.cpp"
    # Not read by a CUDA build of the library: git history, docs, vocab test models, tests, examples, tools
    # (the build below turns them off), the web UI, benches, other GPU backends.
    rm -rf "$top"/{.git,examples,tests,docs} "$src"/{docs,models,media,benches,gguf-py,tests,examples,tools,pocs}
    for backend in sycl vulkan opencl cann metal hexagon openvino webgpu et virtgpu musa hip zdnn; do
        [[ -d "$src/ggml/src/ggml-$backend" ]] && find "$src/ggml/src/ggml-$backend" -type f ! -name CMakeLists.txt -delete
    done
    tar -czf "$dir/llama_cpp_python-$version.tar.gz" -C "$tmp" "llama_cpp_python-$version"
    rm -rf "$tmp"
    du -sh "$dir"/* >&2
}

install() {
    mkdir -p "$site"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dir"/whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    local built
    built="$(ls "$dir"/llama_cpp_python-*-linux_x86_64.whl "$dir"/llama_cpp_python-*-py3-none-*.whl 2>/dev/null | head -1 || true)"
    if [[ -z "$built" ]]; then
        local sdist
        sdist="$(ls "$dir"/llama_cpp_python-*.tar.gz | head -1)"
        local out
        out="$(mktemp -d)"
        # Only the library: no tools, tests, examples, server or multimodal (llava) library. The system's
        # compilers, not the image's default /opt/gcc ones: those link libstdc++ statically into every shared
        # library, and with torch in the process libllama's streams then bind to another libstdc++ copy and
        # crash on every model load (issue 44; checked after the install below).
        CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ \
        CMAKE_ARGS="-DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++ \
-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DLLAVA_BUILD=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" CMAKE_GENERATOR=Ninja \
            "$python" -m pip wheel -q --no-index --no-deps --no-build-isolation --no-cache-dir -w "$out" "$sdist"
        built="$(ls "$out"/llama_cpp_python-*.whl | head -1)"
        if [[ -n "${WHEEL_OUT:-}" ]]; then
            cp "$built" "$WHEEL_OUT/"
        fi
    fi
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$built"
    if ! readelf -d "$site/llama_cpp/lib/libllama.so" | grep -q 'NEEDED.*libstdc++.so.6'; then
        echo "gpu-setup: $site/llama_cpp/lib/libllama.so links libstdc++ statically (built by another compiler" \
             "than /usr/bin/g++): it crashes beside torch; rebuild it (remove the wheel from $dir)" >&2
        exit 1
    fi
    # llama.cpp's CUDA library must load the CUDA libraries torch loads (the pip nvidia-* wheels), not the
    # toolkit's copies it was linked against: with both in one process (llama_cpp imported before torch)
    # cuBLAS is loaded twice and the process aborts ("free(): invalid pointer") or crashes loading a model.
    local nvlibs
    nvlibs="$("$python" -c '
import glob, os, torch
root = os.path.dirname(os.path.dirname(torch.__file__))
libs = glob.glob(os.path.join(root, "nvidia", "**", "lib*.so*"), recursive=True)
print(":".join(sorted({os.path.dirname(p) for p in libs})))')"
    printf 'export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\n' \
        "$nvlibs" "$site" > "$site/gpu-env.sh"
    # shellcheck disable=SC1091
    source "$site/gpu-env.sh"
    echo "environment for the GPU path: source $site/gpu-env.sh"
    cat "$site/gpu-env.sh"
    "$python" -c 'import llama_cpp, torch; print("llama_cpp then torch: ok")'
    "$python" -c '
import importlib.metadata as m
import torch, transformers, llama_cpp
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
print("transformers", transformers.__version__, "llama_cpp_python", m.version("llama_cpp_python"),
      "gpu offload", llama_cpp.llama_supports_gpu_offload())'
}

case "$mode" in
    prepare) prepare ;;
    install) install ;;
    *) echo "unknown mode $mode: use prepare or install" >&2; exit 2 ;;
esac
