"""scripts/rpc_backend_args.sh: the worker gets the CUDA backend where CUDA's compiler and a GPU are both there.

nvcc alone (a build or CI machine carrying the toolkit) must build for the CPU: ggml's configure step detects
the CUDA architecture from the GPU and fails without one, which failed `make setup` on such a machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rpc_backend_args.sh"


def backend_args(tmp_path: Path, nvidia_smi_lists: str | None) -> subprocess.CompletedProcess[str]:
    """rpc_backend_args with a fake nvcc on the PATH and a fake nvidia-smi printing ``nvidia_smi_lists``
    (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"nvcc": "exit 0"}
    if nvidia_smi_lists is not None:
        fakes["nvidia-smi"] = f"printf '%s' '{nvidia_smi_lists}'"
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(["/bin/bash", "-c", f"source {SCRIPT}; rpc_backend_args"], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True)


@pytest.mark.skipif(Path("/etc/nv_tegra_release").exists(), reason="a Jetson always has its GPU")
@pytest.mark.parametrize("listing", [None, "", "No devices were found\n"])
def test_nvcc_without_a_gpu_builds_for_the_cpu_and_says_how_to_choose(tmp_path: Path, listing: str | None) -> None:
    out = backend_args(tmp_path, listing)
    assert out.stdout == ""
    assert "no GPU" in out.stderr and "EDGEOPT_RPC_CMAKE_ARGS=" in out.stderr


def test_nvcc_and_a_listed_gpu_build_the_cuda_backend(tmp_path: Path) -> None:
    out = backend_args(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-0)\n")
    assert out.stdout.strip() == "-DGGML_CUDA=ON"
    assert "CUDA backend" in out.stderr
