"""KV sizing (edgeopt.sizing.budget.size_kv): arithmetic, caps, the memory pool rule and the refusal."""

from __future__ import annotations

import dataclasses

import pytest

from edgeopt.errors import ConfigError, DoesNotFitError
from edgeopt.sizing.budget import (
    MIB, SAFETY_MARGIN, KvFacts, kv_bytes_per_token, memory_pool, require_kv_room, size_kv,
)
from edgeopt.profiles import GIB, load_profile
from edgeopt.profiles.platform import Accelerator, AcceleratorKind

LLAMA_CPP_OVERHEAD = 100 * MIB


def facts(weights: int, elements: int, context: int = 100_000) -> KvFacts:
    return KvFacts(weights_bytes=weights, kv_elements_per_token=elements, context_length=context,
                   runtime_overhead_bytes=LLAMA_CPP_OVERHEAD)


def sized(weights: int, per_token_f16: int, memory: int | None = None, context: int = 4096,
          max_sequences: int | None = None, profile=None):  # noqa: ANN001, ANN201
    pool = memory_pool(profile, memory)
    return size_kv(facts(weights, per_token_f16 // 2), pool, kv_element_bytes=2, context=context,
                   max_sequences=max_sequences)


def test_capacity_is_budget_over_bytes_per_token() -> None:
    memory = 1 * GIB
    s = sized(300 * MIB, 32 * 1024, memory=memory, context=100_000, max_sequences=1)
    budget = memory - int(memory * SAFETY_MARGIN) - 300 * MIB - LLAMA_CPP_OVERHEAD
    assert s.kv_budget_bytes == budget and s.kv_capacity_tokens == budget // (32 * 1024)
    assert s.context_length == s.kv_capacity_tokens and s.memory_source == "--memory"


def test_capacity_is_capped_at_sequences_times_context() -> None:
    s = sized(10 * MIB, 1024, memory=8 * GIB, context=2048)
    assert s.max_sequences == 16 and s.kv_capacity_tokens == 16 * 2048


def test_unified_jetson_profile_counts_memory_once() -> None:
    jetson = load_profile("jetson-orin-nano-8gb")
    s = sized(2 * GIB, 64 * 1024, profile=jetson)
    assert s.usable_memory_bytes == jetson.usable_memory_bytes and s.memory_source == f"profile {jetson.name}"


def test_a_discrete_gpu_profile_sizes_in_gpu_memory() -> None:
    cpu = load_profile("x86-64-cpu")
    rtx = Accelerator(AcceleratorKind.CUDA_GPU, "RTX 4060", cuda_sm=89, memory_bytes=8 * GIB)
    host = dataclasses.replace(cpu, name="rtx", platform=dataclasses.replace(cpu.platform, accelerators=(rtx,)))
    pool = memory_pool(host)
    assert pool.bytes == 8 * GIB and pool.source == "profile rtx (GPU memory)"


def test_host_memory_is_the_default_source() -> None:
    s = sized(MIB, 1024, context=512)
    assert s.memory_source == "host" and s.usable_memory_bytes == load_profile("host").usable_memory_bytes


def test_model_too_big_for_memory_is_refused_with_the_numbers() -> None:
    with pytest.raises(DoesNotFitError, match=r"no memory left for the KV cache: 512 MiB usable \(--memory\)"):
        require_kv_room(sized(600 * MIB, 1024, memory=512 * MIB))


def test_few_tokens_limit_concurrency() -> None:
    s = sized(0, 8192, memory=110 * MIB, context=4096)
    tokens = s.kv_budget_bytes // 8192  # about 580: room for two sequences of 256, not sixteen
    assert s.max_sequences == tokens // 256 == 2
    assert s.context_length == tokens and s.kv_capacity_tokens == tokens


def test_the_kv_element_size_is_a_parameter_and_may_be_fractional() -> None:
    """llama.cpp's q8_0 KV blocks are 34 bytes per 32 elements, q4_0 18 per 32: sized without rounding per element."""
    pool = memory_pool(None, GIB)
    f16, q8 = (size_kv(facts(0, 4096), pool, kv_element_bytes=b, context=4096) for b in (2, 34 / 32))
    assert (f16.kv_bytes_per_token, q8.kv_bytes_per_token) == (8192, kv_bytes_per_token(4096, 34 / 32)) == (8192, 4352)
    assert q8.kv_fit_tokens == q8.kv_budget_bytes // 4352 > f16.kv_fit_tokens


def test_bad_inputs_are_refused_with_their_values() -> None:
    with pytest.raises(ConfigError, match="--memory=0"):
        memory_pool(None, 0)
    with pytest.raises(ConfigError, match="kv_element_bytes=0"):
        size_kv(facts(0, 1), memory_pool(None, GIB), kv_element_bytes=0, context=8)
    with pytest.raises(ConfigError, match="max_sequences=0"):
        size_kv(facts(0, 1), memory_pool(None, GIB), kv_element_bytes=2, context=8, max_sequences=0)


@pytest.mark.parametrize(("asked", "counted"), [(None, 16), (3, 3)])
def test_per_sequence_runtime_memory_is_counted_for_every_sequence_asked_for(asked, counted) -> None:  # noqa: ANN001
    """llama.cpp reserves logits rows per sequence id: the most sequences serve may admit are charged, so
    fewer fitting never leaves their rows unpaid."""
    per_sequence = 2 * MIB
    with_rows = dataclasses.replace(facts(100 * MIB, 1024), runtime_bytes_per_sequence=per_sequence)
    pool = memory_pool(None, 2 * GIB)
    plain = size_kv(facts(100 * MIB, 1024), pool, kv_element_bytes=2, context=4096, max_sequences=asked)
    charged = size_kv(with_rows, pool, kv_element_bytes=2, context=4096, max_sequences=asked)
    assert charged.overhead_bytes == LLAMA_CPP_OVERHEAD + counted * per_sequence
    assert plain.kv_budget_bytes - charged.kv_budget_bytes == counted * per_sequence
