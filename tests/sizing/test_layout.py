"""The KV layout `serve --kv-layout auto` picks, computed without llama.cpp (edgeopt.sizing.layout), against the
runtime's own split of the cells into streams; and what `edgeopt plan` shows of it."""

from __future__ import annotations

import itertools

import pytest

from edgeopt.errors import ConfigError
from edgeopt.sizing.layout import auto_kv_layout
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.checkpoint import size_candidate
from edgeopt.sizing.layout import stream_layout
from tests.planning.test_plan import QWEN_05B, profile


def runtime_gives_full_streams(cells: int, sequences: int, context: int, prefix_cache: bool) -> bool:
    """Whether llama.cpp's runtime, given ``cells``, lays out a full-context stream per sequence and per cache entry."""
    cache = sequences if prefix_cache else 0
    try:
        layout = stream_layout(cells, sequences, cache, context)
    except ConfigError:  # not even STREAM_ALIGN cells per sequence
        return False
    return layout.stream_cells >= context and layout.cache_slots >= cache


@pytest.mark.parametrize("context", [100, 256, 257, 2048])
def test_auto_picks_streams_exactly_when_the_runtime_can_lay_them_out(context: int) -> None:
    for sequences, prefix_cache, cells in itertools.product([1, 3, 16], [True, False], range(0, 70_000, 97)):
        expected = "streams" if runtime_gives_full_streams(cells, sequences, context, prefix_cache) else "unified"
        assert auto_kv_layout(cells, sequences, context, prefix_cache) == expected, (cells, sequences, prefix_cache)


def test_plan_shows_the_layout_serve_would_pick() -> None:
    spec = spec_from_config(QWEN_05B, "qwen")  # 12 KiB of f16 KV per token
    roomy = size_candidate(spec, profile(8, 1.5), "gguf", "Q8_0", 2048, 4, kv_type="f16")
    tight = size_candidate(spec, profile(1.5, 0.5), "gguf", "Q8_0", 2048, 16, kv_type="f16")
    onnx = size_candidate(spec, profile(8, 1.5), "onnx", "int8", 2048, 4)
    assert roomy.kv_token_capacity >= 2 * 4 * 2048 and roomy.kv_layout == "streams"
    assert tight.kv_token_capacity < 2 * 16 * 2048 and tight.kv_layout == "unified"
    assert onnx.kv_layout is None  # one layout: nothing to pick
