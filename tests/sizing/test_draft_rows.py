"""Logits rows for speculative steps (ShapeRequest.draft_rows): llama.cpp's output buffer holds a fixed number of
rows, one per sequence id, so a lone stream without cached prefixes could not verify a single drafted token.
The shape reserves the longest draft's rows where the runtime needs them, and counts their bytes."""

from __future__ import annotations

from edgeopt import backends
from edgeopt.speculation_modes import MAX_DRAFT_TOKENS, longest_draft
from edgeopt.sizing.budget import KvFacts, MemoryPool
from edgeopt.sizing.shape import ShapeRequest, decide_serving_shape

MIB = 2**20
VOCAB = 49152
GGUF = backends.backend("gguf")
FACTS = KvFacts(weights_bytes=100 * MIB, kv_elements_per_token=5120, context_length=4096,
                runtime_overhead_bytes=100 * MIB, runtime_bytes_per_sequence=GGUF.logits_bytes_per_sequence(VOCAB))


def shape(entry, draft_rows: int):  # noqa: ANN001, ANN201 - a Backend, a ServingShape
    request = ShapeRequest(context=1024, max_sequences=1, prefix_cache=False, draft_rows=draft_rows)
    return decide_serving_shape(entry, "Q8_0" if entry is GGUF else "int8", FACTS,
                                MemoryPool(300 * MIB, "--memory"), request)


def test_the_longest_draft_is_what_a_mode_can_draft() -> None:
    assert longest_draft("off") == 0 and longest_draft("off", 4) == 0
    assert longest_draft("ngram") == longest_draft("auto") == MAX_DRAFT_TOKENS
    assert longest_draft("draft", 6) == longest_draft("auto", 6) == 6


def test_llama_cpp_gets_the_rows_and_the_budget_pays_for_them() -> None:
    plain, drafting = shape(GGUF, 0), shape(GGUF, 10)
    assert "draft_rows" not in plain.runtime_options() and drafting.runtime_options()["draft_rows"] == 10
    # Two copies of each row (llama.cpp's output buffer and its graph's logits), out of the KV's memory.
    rows_bytes = 2 * 10 * VOCAB * 4
    assert plain.sizing.kv_fit_tokens - drafting.sizing.kv_fit_tokens == rows_bytes // plain.sizing.kv_bytes_per_token


def test_a_runtime_without_a_fixed_output_buffer_reserves_nothing() -> None:
    onnx = backends.backend("onnx")
    assert onnx.memory.logits_rows_per_sequence == 0
    assert shape(onnx, 10).draft_rows == 0 and "draft_rows" not in shape(onnx, 10).runtime_options()
