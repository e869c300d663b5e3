# Sourced by build_rpc_worker.sh: which llama.cpp backend the RPC worker is built with, by what the machine has.
# rpc_backend_args prints the cmake options ("-DGGML_CUDA=ON" or nothing) and says why on stderr.

# A GPU the build can see: CUDA's compiler alone is not enough (a CI or build machine may carry the toolkit
# without a GPU, and ggml's native CUDA architecture detection then fails the configure step).
gpu_visible() {
    [[ -e /etc/nv_tegra_release ]] && return 0  # a Jetson (older JetPacks have no nvidia-smi)
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

rpc_backend_args() {
    command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || return 0
    if gpu_visible; then
        echo "build_rpc_worker: CUDA's compiler and a GPU found: building the worker with the CUDA backend" \
             "(EDGEOPT_RPC_CMAKE_ARGS= builds it for the CPU only)" >&2
        echo "-DGGML_CUDA=ON"
    else
        echo "build_rpc_worker: CUDA's compiler found but no GPU (nvidia-smi -L lists none): building the worker" \
             "for the CPU (EDGEOPT_RPC_CMAKE_ARGS=\"-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=<arch>\" builds" \
             "it for a GPU elsewhere)" >&2
    fi
}
