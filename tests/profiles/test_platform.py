"""The typed platform: what each profile's hardware says, an NPU board that loads and plans on its CPU, and each
runtime's refusal of the NPU it cannot drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import BundleError, ConfigError
from edgeopt.planning.checkpoint import make_plan
from edgeopt.profiles import load_profile, profile_from_dict, profile_names
from edgeopt.profiles.platform import AcceleratorKind, Platform
from edgeopt.sizing.budget import memory_pool
from edgeopt.sources.model_spec import spec_from_config

NPU_PROFILE = Path(__file__).with_name("rock-5b-npu.toml")
SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 256,
               "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "tie_word_embeddings": True, "max_position_embeddings": 2048}


@pytest.fixture(scope="module")
def npu_board():
    return load_profile(str(NPU_PROFILE))


@pytest.mark.parametrize("name", [n for n in profile_names() if n != "host"] + ["host"])
def test_every_profile_reads_back_from_its_fields(name: str) -> None:
    profile = load_profile(name)
    assert profile_from_dict(profile.to_fields(), f"{name}.toml") == profile


def test_the_npu_board_loads_with_its_npu_and_big_cores(npu_board) -> None:
    platform = npu_board.platform
    assert [(a.kind, a.name) for a in platform.accelerators] == [(AcceleratorKind.NPU, "rockchip-rknpu2")]
    assert not platform.has_cuda and platform.cuda_device is None
    assert platform.accelerator_label == "npu:rockchip-rknpu2"
    assert (platform.cpu.cores, platform.cpu.big_cores, platform.cpu.little_cores) == (8, 4, 4)
    assert platform.cpu.compute_threads == 4
    assert profile_from_dict(npu_board.to_fields(), "again.toml") == npu_board


def test_the_npu_board_plans_on_its_cpu_and_memory(npu_board) -> None:
    from edgeopt.exporters.torch.sizes import torch_candidates

    pool = memory_pool(npu_board)
    assert pool.bytes == npu_board.usable_memory_bytes and pool.source == "profile rock-5b-npu"
    assert torch_candidates(npu_board) == ("fp32", "bf16")  # CPU dtypes: the NPU runs nothing
    plan = make_plan(spec_from_config(SMALL_LLAMA, "small"), npu_board)
    assert plan.candidates and all(c.fits for c in plan.candidates)


def _refusal_names_the_npu_and_the_fix(err: pytest.ExceptionInfo, runtime: str, cpu_option: str) -> None:
    assert "rock-5b-npu" in err.value.message and "NPU (rockchip-rknpu2)" in err.value.message
    assert f"the {runtime} runtime cannot use" in err.value.message
    assert cpu_option in err.value.hint and "[[accelerators]]" in err.value.hint


def test_llama_cpp_refuses_the_npu_unless_asked_for_the_cpu(npu_board, tmp_path: Path) -> None:
    from edgeopt.runtimes.llama_cpp import load_gguf

    missing = tmp_path / "model.gguf"
    with pytest.raises(ConfigError) as err:
        load_gguf(missing, kv_capacity_tokens=256, max_slots=1, profile=npu_board)
    _refusal_names_the_npu_and_the_fix(err, "llama_cpp", "n_gpu_layers=0")
    with pytest.raises(BundleError, match="does not exist"):  # past the refusal: on to the (missing) file
        load_gguf(missing, kv_capacity_tokens=256, max_slots=1, profile=npu_board, n_gpu_layers=0)


def test_onnxruntime_refuses_the_npu_unless_given_providers(npu_board) -> None:
    from edgeopt.runtimes.onnxruntime.session import CPU, resolve_providers

    with pytest.raises(ConfigError) as err:
        resolve_providers(None, npu_board)
    _refusal_names_the_npu_and_the_fix(err, "onnxruntime", "providers=['cpu']")
    assert resolve_providers(["cpu"], npu_board) == [CPU]


def test_torch_refuses_the_npu_unless_asked_for_the_cpu(npu_board) -> None:
    pytest.importorskip("torch")
    from edgeopt.runtimes.torch.loading import pick_device, pick_dtype

    with pytest.raises(ConfigError) as err:
        pick_device("auto", npu_board)
    _refusal_names_the_npu_and_the_fix(err, "torch", "device='cpu'")
    on_cpu = pick_device("cpu", npu_board)
    assert on_cpu.on_cpu and on_cpu.name == "cpu" and pick_dtype("auto", "float16", on_cpu) == "float32"
    assert pick_device("auto", load_profile("raspberry-pi")).on_cpu


def test_a_cuda_platform_places_cuda_and_a_cpu_one_refuses_it() -> None:
    jetson = load_profile("jetson").platform
    assert jetson.placement("auto") is jetson.cuda_device and jetson.placement("CPU") is None
    assert jetson.cuda_device is not None and jetson.cuda_device.cuda_sm == 87
    cpu = Platform.cpu_only(8.0, 4, "arm64")
    assert cpu.placement("auto") is None
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        cpu.placement("cuda")
    with pytest.raises(ConfigError, match="'tpu' is not supported"):
        cpu.placement("tpu")


def test_a_discrete_gpu_keeps_its_own_memory_a_unified_one_shares() -> None:
    fields = load_profile("x86-64-cpu").to_fields()
    discrete = profile_from_dict(fields | {"accelerator": "cuda:sm_89", "gpu_memory_gb": 8.0}, "rtx.toml")
    assert discrete.platform.offload_memory_bytes == 8 * 1024**3
    unified = profile_from_dict(fields | {"accelerator": "cuda", "gpu_memory_gb": 8.0, "unified_memory": True},
                                "shared.toml")
    assert unified.platform.offload_memory_bytes == 0 and unified.platform.cuda_device.cuda_sm is None


@pytest.mark.parametrize("change, field", [
    ({"accelerator": "gpu"}, "accelerator='gpu'"),
    ({"accelerators": [{"kind": "tpu"}]}, "kind='tpu'"),
    ({"accelerators": [{"kind": "npu", "tops": 6}]}, "accelerators=['tops']"),
    ({"accelerators": [{"kind": "npu", "cuda_sm": 87}]}, "cuda_sm=87"),
    ({"big_cores": 9}, "big_cores=9"),
    ({"cpu_isa": "riscv"}, "cpu_isa='riscv'"),
])
def test_a_bad_hardware_field_names_itself(change: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        profile_from_dict(load_profile("x86-64-cpu").to_fields() | change, "bad.toml")
    assert "bad.toml" in err.value.message and field in err.value.message
