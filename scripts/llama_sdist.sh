# Sourced by build_llama_server.sh and build_llama_tools.sh: the llama.cpp sources vendored in
# llama-cpp-python's source distribution, downloaded and unpacked once per version for both builds.
#
# llama_cpp_sources PYTHON VERSION CACHE_ROOT  prints the llama.cpp source directory; EDGEOPT_LLAMA_SDIST,
# an already unpacked sdist directory, skips the download.
llama_cpp_sources() {
    local python="$1" version="$2" cache_root="$3"
    local sdist_dir="${EDGEOPT_LLAMA_SDIST:-}"
    if [[ -z "$sdist_dir" ]]; then
        local download_dir="$cache_root/llama-cpp-python-sdist-$version"
        sdist_dir="$download_dir/llama_cpp_python-$version"
        if [[ ! -d "$sdist_dir" ]]; then
            mkdir -p "$download_dir"
            "$python" -m pip download "llama-cpp-python==$version" --no-deps --no-binary :all: \
                --dest "$download_dir" >&2
            tar -xzf "$download_dir/llama_cpp_python-$version.tar.gz" -C "$download_dir"
        fi
    fi
    echo "$sdist_dir/vendor/llama.cpp"
}
