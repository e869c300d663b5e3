"""The serving shape's KV cells by purpose (edgeopt.sizing.shape.cells_by_purpose): streams give each running
sequence a stream and each cached prefix one while memory holds it; --prefix-cache-memory sets what cached
prefixes get, in either layout."""

from __future__ import annotations

import pytest

from edgeopt import backends
from edgeopt.sizing.budget import KvFacts, MemoryPool
from edgeopt.sizing.shape import ShapeRequest, decide_serving_shape

MIB = 2**20
# 20 KiB of f16 KV a token (5,120 elements), a 4,096-token window, 100 MiB of weights.
FACTS = KvFacts(weights_bytes=100 * MIB, kv_elements_per_token=5120, context_length=4096,
                runtime_overhead_bytes=100 * MIB)
PER_TOKEN = 5120 * 2


def shape(memory_mib: int, **request):  # noqa: ANN201 - a ServingShape
    return decide_serving_shape(backends.backend("gguf"), "Q8_0", FACTS, MemoryPool(memory_mib * MIB, "--memory"),
                                ShapeRequest(context=1024, max_sequences=4, **request))


def test_streams_give_cached_prefixes_a_stream_each_while_memory_holds_them() -> None:
    roomy = shape(4096)
    assert roomy.kv_layout == "streams" and roomy.cache_slots == 8  # as many as running sequences, at least 8
    assert (roomy.kv_live_cells, roomy.kv_prefix_cells) == (4 * 1024, 8 * 1024)
    assert roomy.kv_cells == 12 * 1024 and roomy.runtime_options()["cache_slots"] == 8


def test_prefix_cache_memory_sets_the_streams_cached_prefixes_get() -> None:
    limited = shape(4096, prefix_cache_bytes=2 * 1024 * PER_TOKEN)  # two streams' worth
    assert (limited.kv_live_cells, limited.kv_prefix_cells, limited.cache_slots) == (4096, 2048, 2)
    none = shape(4096, prefix_cache_bytes=0)
    assert (none.kv_prefix_cells, none.cache_slots, none.kv_cells) == (0, 0, 4096)


def test_unified_prefixes_share_the_pool_unless_given_memory_of_their_own() -> None:
    tight = shape(400, kv_layout="unified")
    assert tight.kv_layout == "unified" and (tight.kv_live_cells, tight.kv_prefix_cells) == (4096, 0)
    more = shape(400, kv_layout="unified", prefix_cache_bytes=10 * MIB)
    assert more.kv_prefix_cells == 10 * MIB // PER_TOKEN and more.kv_cells == 4096 + more.kv_prefix_cells
    squeezed = shape(250, kv_layout="unified", prefix_cache_bytes=1024 * MIB)  # never past what memory holds
    assert squeezed.kv_cells <= squeezed.sizing.kv_fit_tokens


@pytest.mark.parametrize("args", [["--no-prefix-cache", "--prefix-cache-memory", "64MiB"]])
def test_serve_refuses_prefix_cache_memory_beside_no_prefix_cache(args: list[str], tmp_path) -> None:
    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    result = CliRunner().invoke(app, ["serve", str(tmp_path), *args])
    assert "which --no-prefix-cache turns off" in str(result.exception)
