"""--kv-layout streams at serve time: a stream of --context cells per slot, the cells that remain in the
memory budget as cached-prefix streams, never more cells than the budget holds; refused for ONNX.
``auto`` (the default) picks streams only when memory holds a stream per slot and one more per slot for
cached prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.store.bundle import load_bundle
from edgeopt.errors import ConfigError
from edgeopt.server.startup.launcher import (
    ServeOptions,
    load_served_model,
    serve_bundle,
    serving_shape,
)
from tests.fixtures.demo_gguf import optimize_demo_gguf
from tests.server.test_kv_type_serving import memory_for_f16_sequences


@pytest.fixture(scope="module")
def bundle(demo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return optimize_demo_gguf(demo_model_dir, tmp_path_factory.mktemp("kv-layout") / "demo-q8kv", "q8_0")


def test_streams_fit_the_memory_budget_and_keep_the_context(bundle: Path) -> None:
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=memory_for_f16_sequences(bundle, 8.2, 256, 8), context=256, threads=1,
                           max_concurrency=8, kv_layout="streams")
    shape = serving_shape(bundle, manifest, options)
    sizing = shape.sizing
    assert sizing.kv_fit_tokens // 256 == 15  # q8_0 KV: 8.2 f16 contexts x 2 / (34 / 32)
    served = load_served_model(bundle, manifest, shape, options)
    try:
        info = served.runtime.info
        assert served.runtime.kv_layout == "streams" and not info.shares_kv_cells
        assert (info.max_slots, info.cache_slots, info.context_length) == (8, 7, 256)  # 15 streams of 256
        assert info.kv_capacity_tokens == 15 * 256 <= sizing.kv_fit_tokens
        assert served.engine.context_tokens == 256 and served.engine.stats().kv_capacity_tokens == 15 * 256
    finally:
        served.engine.shutdown()


def test_serve_refuses_streams_for_an_onnx_bundle_before_loading(onnx_fp32_bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        serve_bundle(onnx_fp32_bundle, ServeOptions(kv_layout="streams", port=0))
    assert "--kv-layout streams applies to llama.cpp (GGUF) bundles" in err.value.message


@pytest.mark.parametrize(("slots", "prefix_cache", "layout"),
                         [(7, True, "streams"), (8, True, "unified"), (15, False, "streams"), (16, False, "unified")])
def test_auto_picks_streams_when_memory_holds_a_stream_per_slot_and_cache_entry(
        bundle: Path, slots: int, prefix_cache: bool, layout: str) -> None:
    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=memory_for_f16_sequences(bundle, 8.2, 256, slots), context=256, max_concurrency=slots,
                           prefix_cache=prefix_cache)
    shape = serving_shape(bundle, manifest, options)  # q8_0: 15 streams of 256 cells fit
    sizing = shape.sizing
    assert shape.kv_layout == layout


def test_an_unknown_layout_is_refused_before_loading(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        serve_bundle(bundle, ServeOptions(kv_layout="paged", port=0))
    assert "--kv-layout 'paged' is not a KV layout" in err.value.message
