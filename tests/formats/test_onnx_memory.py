"""ONNX Runtime's share of the plan (edgeopt.formats.onnx.memory): what it builds from the file, KV held three
times, a prompt's KV twice more; the constants that mirror the engine's and the server's stay equal to them.
The figures themselves are held to measurements by tests/server/test_resident_memory.py."""

from __future__ import annotations

from edgeopt import backends
from edgeopt.engine.api import DEFAULT_PREFILL_CHUNK
from edgeopt.server.batching.length_batches import DEFAULT_MAX_TOKENS
from edgeopt.formats.onnx import memory as onnx_memory
from edgeopt.sizing.budget import MemoryPool, model_kv_facts, size_kv
from edgeopt.sizing.resident import ResidentMemory

MIB = 2**20


def test_the_mirrored_constants_equal_the_engines_and_the_servers() -> None:
    assert onnx_memory.PREFILL_CHUNK_TOKENS == DEFAULT_PREFILL_CHUNK
    assert onnx_memory.EMBEDDING_BATCH_TOKENS == DEFAULT_MAX_TOKENS


def test_a_tied_output_projection_costs_a_float32_table_whatever_the_quant() -> None:
    untied = onnx_memory.weights_extra_bytes(100 * MIB, 49152, 576, tied_embeddings=False)
    tied = onnx_memory.weights_extra_bytes(100 * MIB, 49152, 576, tied_embeddings=True)
    assert untied == int(100 * MIB * onnx_memory.WEIGHTS_EXTRA_FRACTION)
    assert tied - untied == 49152 * 576 * 4  # SmolLM2's table: 108 MiB


def _onnx_sizing(memory_mib: int, context: int = 512, sequences: int = 4):
    facts = model_kv_facts(backends.backend("onnx"), vocab_size=49152, intermediate_size=1536,
                           weights_bytes=147 * MIB, kv_elements_per_token=11520, context_length=8192, hidden_size=576,
                           tied_embeddings=True)
    return size_kv(facts, MemoryPool(memory_mib * MIB, "--memory"), kv_element_bytes=4, context=context,
                   max_sequences=sequences)


def test_kv_held_three_times_is_budgeted_three_times() -> None:
    sizing = _onnx_sizing(2048)
    per_token = 11520 * 4
    assert sizing.kv_copies == 3.0 and sizing.kv_bytes_per_token == per_token
    assert sizing.kv_fit_tokens == sizing.kv_budget_bytes // (3 * per_token)
    # a prompt of the full context is held twice more while it is prefilled: part of the runtime's overhead
    assert sizing.overhead_bytes >= 2 * 512 * per_token + 120 * MIB
    resident = ResidentMemory(weights_bytes=sizing.weights_bytes, kv_live_cells=2048, kv_prefix_cells=0,
                              kv_bytes_per_token=per_token, runtime_buffer_bytes=0, process_bytes=0,
                              kv_copies=sizing.kv_copies)
    assert resident.kv_live_bytes == 3 * 2048 * per_token


def test_a_memory_that_held_the_kv_once_no_longer_holds_four_full_sequences() -> None:
    """At 2048 MiB four 512-token sequences fit; at 700 MiB the budget left for KV (~178 MiB) holds them once
    (90 MiB) but not three times, and the plan says so."""
    assert _onnx_sizing(2048).kv_fit_tokens >= 4 * 512
    tight = _onnx_sizing(700)
    assert tight.kv_budget_bytes >= 4 * 512 * 11520 * 4 and tight.kv_fit_tokens < 4 * 512
