"""edgeopt.rpc.worker_build.toolchain: the worker gets the CUDA backend where CUDA's compiler and a GPU are both there.

nvcc alone (a build or CI machine carrying the toolkit) must build for the CPU: ggml's configure step detects
the CUDA architecture from the GPU and fails without one, which failed `make setup` on such a machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.rpc.worker_build.toolchain import GgmlBuildBackend, choose_backend


def fake_path(tmp_path: Path, nvidia_smi_lists: str | None) -> str:
    """A PATH with a fake nvcc and a fake nvidia-smi printing ``nvidia_smi_lists`` (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"nvcc": "exit 0"}
    if nvidia_smi_lists is not None:
        fakes["nvidia-smi"] = f"printf '%s' '{nvidia_smi_lists}'"
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


@pytest.fixture(autouse=True)
def _no_choice_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGEOPT_RPC_CMAKE_ARGS", raising=False)


@pytest.mark.skipif(Path("/etc/nv_tegra_release").exists(), reason="a Jetson always has its GPU")
@pytest.mark.parametrize("listing", [None, "", "No devices were found\n"])
def test_nvcc_without_a_gpu_builds_for_the_cpu_and_says_how_to_choose(
        tmp_path: Path, listing: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    assert choose_backend(fake_path(tmp_path, listing)) == GgmlBuildBackend()
    said = capsys.readouterr().err
    assert "no GPU" in said and "EDGEOPT_RPC_CMAKE_ARGS=" in said


def test_nvcc_and_a_listed_gpu_build_the_cuda_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = choose_backend(fake_path(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-0)\n"))
    assert backend.cmake_args == ("-DGGML_CUDA=ON",)
    assert "CUDA backend" in capsys.readouterr().err


@pytest.mark.parametrize("chosen, args", [("", ()), ("-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=87",
                                                      ("-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=87"))])
def test_the_users_cmake_arguments_win_even_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  chosen: str, args: tuple[str, ...]) -> None:
    monkeypatch.setenv("EDGEOPT_RPC_CMAKE_ARGS", chosen)
    assert choose_backend(fake_path(tmp_path, "GPU 0: NVIDIA H200\n")).cmake_args == args
