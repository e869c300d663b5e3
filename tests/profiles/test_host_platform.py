"""This machine's platform from the files that describe it: a Jetson's integrated GPU on shared memory, a discrete
GPU the driver lists without nvidia-smi, big and little cores, the instruction set."""

from __future__ import annotations

from pathlib import Path

from edgeopt.profiles.host import big_cpu_count, host_platform, usable_cpu_count
from edgeopt.profiles.host_accelerators import HostFiles, find_accelerators
from edgeopt.profiles.instruction_sets import detect_instruction_set
from edgeopt.profiles.platform import AcceleratorKind


def _files(root: Path) -> HostFiles:
    return HostFiles(tegra_release=root / "etc/nv_tegra_release", device_tree=root / "device-tree",
                     driver_gpus=root / "driver/gpus", dev=root / "dev")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_jetson_has_a_cuda_gpu_on_shared_memory(tmp_path: Path) -> None:
    files = _files(tmp_path)
    _write(files.device_tree / "model", "NVIDIA Jetson Orin Nano Developer Kit\0")
    _write(files.device_tree / "compatible", "nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0")
    found = find_accelerators(files, has_nvidia_smi=True)  # JetPack 6 has an nvidia-smi; the board decides first
    assert found.memory_shared and len(found.accelerators) == 1
    gpu = found.accelerators[0]
    assert gpu.kind is AcceleratorKind.CUDA_GPU and gpu.cuda_sm == 87 and "Orin Nano" in gpu.name


def test_without_nvidia_smi_the_driver_or_its_device_nodes_show_a_gpu(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert find_accelerators(files, has_nvidia_smi=False).accelerators == ()
    _write(files.dev / "nvidiactl", "")
    assert find_accelerators(files, has_nvidia_smi=False).accelerators == ()  # the control node is no GPU
    _write(files.dev / "nvidia0", "")
    (node_gpu,) = find_accelerators(files, has_nvidia_smi=False).accelerators
    assert node_gpu.kind is AcceleratorKind.CUDA_GPU and node_gpu.cuda_sm is None
    _write(files.driver_gpus / "0000:01:00.0/information", "Model: \t\t NVIDIA GeForce RTX 4090\nIRQ: 16\n")
    found = find_accelerators(files, has_nvidia_smi=False)
    assert [g.name for g in found.accelerators] == ["NVIDIA GeForce RTX 4090"] and not found.memory_shared


def test_big_cores_are_counted_apart_from_little_ones(tmp_path: Path) -> None:
    for n, capacity in enumerate([1024] * 4 + [414] * 4):  # an RK3588: four A76, four A55
        _write(tmp_path / f"cpu{n}/cpu_capacity", f"{capacity}\n")
    assert big_cpu_count(list(range(8)), tmp_path) == 4
    assert big_cpu_count([4, 5], tmp_path) == 2  # only little ones allowed: they are this process's big ones


def test_cores_are_alike_when_any_speed_is_unknown_or_close(tmp_path: Path) -> None:
    for n, khz in enumerate([5_200_000, 5_000_000, 4_900_000]):  # turbo-favoured cores of one design
        _write(tmp_path / f"cpu{n}/cpufreq/cpuinfo_max_freq", f"{khz}\n")
    assert big_cpu_count([0, 1, 2], tmp_path) == 3
    _write(tmp_path / "cpu3/cpufreq/cpuinfo_max_freq", "3900000\n")  # an E-core at 75%
    assert big_cpu_count([0, 1, 2, 3], tmp_path) == 3
    assert big_cpu_count([0, 1, 2, 3, 4], tmp_path) == 5  # cpu4 says nothing: no telling big from little


def test_instruction_set_from_the_machine_and_its_flags() -> None:
    assert detect_instruction_set("aarch64", {"asimddp"}).name == "arm64"
    assert detect_instruction_set("x86_64", {"sse4_2"}).name == "x86_64"
    assert detect_instruction_set("x86_64", {"avx2", "fma"}).name == "avx2"
    assert detect_instruction_set("AMD64", {"avx2", "avx512_vnni"}).name == "avx512_vnni"
    assert detect_instruction_set("riscv64", set()).name == "x86_64"  # unknown: the baseline, as before


def test_this_machine_counts_the_cpus_it_may_use() -> None:
    platform = host_platform()
    assert platform.cpu.cores == usable_cpu_count() and 1 <= platform.cpu.big_cores <= platform.cpu.cores
