"""KV sizing from memory: arithmetic, caps, sources and the refusal when nothing fits."""

from __future__ import annotations

import pytest

from edgeopt.engine.memory import kv_capacity_for
from edgeopt.errors import DoesNotFitError
from edgeopt.memory_budget import MIB, RUNTIME_OVERHEAD_BYTES, SAFETY_MARGIN
from profiles import GIB, load_profile


def test_capacity_is_budget_over_bytes_per_token() -> None:
    memory = 1 * GIB
    s = kv_capacity_for(300 * MIB, 32 * 1024, memory_bytes=memory, context_length=100_000, max_sequences=1)
    budget = memory - int(memory * SAFETY_MARGIN) - 300 * MIB - RUNTIME_OVERHEAD_BYTES["llama_cpp"]
    assert s.kv_budget_bytes == budget and s.kv_capacity_tokens == budget // (32 * 1024)
    assert s.context_length == s.kv_capacity_tokens and s.memory_source == "--memory"


def test_capacity_is_capped_at_sequences_times_context() -> None:
    s = kv_capacity_for(10 * MIB, 1024, memory_bytes=8 * GIB, context_length=2048)
    assert s.max_sequences == 16 and s.kv_capacity_tokens == 16 * 2048


def test_unified_jetson_profile_counts_memory_once() -> None:
    jetson = load_profile("jetson-orin-nano-8gb")
    s = kv_capacity_for(2 * GIB, 64 * 1024, profile=jetson, context_length=4096)
    assert s.usable_memory_bytes == jetson.usable_memory_bytes and s.memory_source.startswith("profile")


def test_host_memory_is_the_default_source() -> None:
    s = kv_capacity_for(MIB, 1024, context_length=512)
    assert s.memory_source == "host" and s.usable_memory_bytes == load_profile("host").usable_memory_bytes


def test_model_too_big_for_memory_is_refused_with_the_numbers() -> None:
    with pytest.raises(DoesNotFitError, match=r"no memory left for the KV cache: 512 MiB usable \(--memory\)"):
        kv_capacity_for(600 * MIB, 1024, memory_bytes=512 * MIB)


def test_few_tokens_limit_concurrency() -> None:
    s = kv_capacity_for(0, 8192, memory_bytes=110 * MIB, context_length=4096)
    tokens = s.kv_budget_bytes // 8192  # about 580: room for two sequences of 256, not sixteen
    assert s.max_sequences == tokens // 256 == 2
    assert s.context_length == tokens and s.kv_capacity_tokens == tokens
