"""Flash or plain attention in the serving shape (edgeopt.sizing.attention): where plain attention may run its
score buffer is sized in, what the runtime is told, and the choices refused with what to do instead."""

from __future__ import annotations

import pytest

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.sizing.attention import plain_attention_buffer_bytes
from edgeopt.sizing.budget import KvFacts, MemoryPool
from edgeopt.sizing.shape import ShapeRequest, decide_serving_shape

MIB = 2**20
HEADS = 8
# 20 KiB of f16 KV a token, a 4,096-token window, 100 MiB of weights, 8 query heads.
FACTS = KvFacts(weights_bytes=100 * MIB, kv_elements_per_token=5120, context_length=4096,
                runtime_overhead_bytes=100 * MIB, attention_heads=HEADS)
BUFFER = plain_attention_buffer_bytes(backends.backend("gguf").serving.batch_tokens, 1024, HEADS)


def shape(memory_mib: int, fmt: str = "gguf", quant: str = "Q8_0", **request):
    return decide_serving_shape(backends.backend(fmt), quant, FACTS, MemoryPool(memory_mib * MIB, "--memory"),
                                ShapeRequest(context=1024, max_sequences=4, **request))


def test_the_buffer_is_a_score_per_batch_token_stream_cell_and_head() -> None:
    # llama.cpp's KQ in f32; a stream's cells round up to 256 (measured on SmolLM2: 17.2 MiB at 128 x 4,096 x 9)
    assert plain_attention_buffer_bytes(128, 4096, 9) == 128 * 4096 * 9 * 4
    assert plain_attention_buffer_bytes(128, 1000, 9) == 128 * 1024 * 9 * 4


def test_auto_in_the_streams_layout_reserves_the_buffer_and_measures() -> None:
    with_buffer, flash = shape(4096), shape(4096, flash_attention="on")
    assert with_buffer.kv_layout == flash.kv_layout == "streams"
    assert with_buffer.attention_buffer_bytes == BUFFER and flash.attention_buffer_bytes == 0
    assert with_buffer.sizing.overhead_bytes - flash.sizing.overhead_bytes == BUFFER  # counted as the runtime's
    assert with_buffer.runtime_options()["flash_attention"] == "measured"
    assert flash.runtime_options()["flash_attention"] == "on"


def test_the_unified_pool_and_a_quantized_cache_keep_llama_cpps_choice() -> None:
    for unchanged in (shape(4096, kv_layout="unified"), shape(4096, kv_type="q8_0"), shape(250)):
        assert unchanged.attention_buffer_bytes == 0
        assert unchanged.runtime_options()["flash_attention"] == "llama-auto"
    assert shape(250).kv_layout == "unified"  # too tight for streams


def test_auto_keeps_the_streams_layout_over_the_buffer() -> None:
    # The smallest memory in which auto picks streams without the buffer: with it, streams would not fit, so
    # auto keeps streams and flash attention instead of turning the shape unified.
    edge = next(m for m in range(250, 4096) if shape(m, flash_attention="on").kv_layout == "streams")
    assert shape(edge - 1, flash_attention="on").kv_layout == "unified"
    at_edge = shape(edge)
    assert at_edge.kv_layout == "streams" and at_edge.attention_buffer_bytes == 0
    assert at_edge.runtime_options()["flash_attention"] == "llama-auto"


@pytest.mark.parametrize("request_, refused", [
    ({"flash_attention": "sometimes"}, "--flash-attention 'sometimes' is not a choice"),
    ({"flash_attention": "off", "kv_type": "q8_0"}, "--flash-attention off with --kv-type q8_0"),
    ({"flash_attention": "off", "kv_layout": "unified"}, "--flash-attention off needs the streams KV layout"),
])
def test_choices_plain_attention_cannot_take_are_refused_with_the_fix(request_: dict, refused: str) -> None:
    with pytest.raises(ConfigError) as caught:
        shape(4096, **request_)
    assert refused in str(caught.value)
    assert caught.value.hint


def test_off_is_sized_and_passed_on_in_the_streams_layout() -> None:
    off = shape(4096, flash_attention="off")
    assert off.attention_buffer_bytes == BUFFER and off.runtime_options()["flash_attention"] == "off"


def test_a_runtime_without_the_choice_refuses_it_and_ignores_auto() -> None:
    with pytest.raises(ConfigError, match="applies to llama.cpp"):
        shape(4096, fmt="onnx", quant="int8", flash_attention="off")
    assert "flash_attention" not in shape(4096, fmt="onnx", quant="int8").runtime_options()
