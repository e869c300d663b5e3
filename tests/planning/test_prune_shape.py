"""Pruning arithmetic: ratios become uniform, standard shapes that hit the requested size."""

from __future__ import annotations

import pytest

from edgeopt.errors import ConfigError, PassError
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.prune_shape import (PruneRequest, feasible_head_counts, mlp_alignment, pruned_spec,
                                        solve_shape)


def make_spec(layers: int = 16, heads: int = 32, kv: int = 8, inter: int = 8192, hidden: int = 2048):
    return spec_from_config({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": hidden,
                             "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
                             "num_key_value_heads": kv}, "test")


@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.3, 0.5])
def test_ratio_removes_that_fraction_of_non_embedding_params(ratio: float) -> None:
    spec = make_spec()
    after = pruned_spec(spec, PruneRequest(ratio=ratio))
    removed = 1 - after.num_non_embedding_parameters / spec.num_non_embedding_parameters
    assert removed == pytest.approx(ratio, abs=0.015)  # MLP width moves in 256-channel steps (~2.4% here)
    assert after.intermediate_size % mlp_alignment(spec.intermediate_size) == 0
    assert after.num_heads % after.num_kv_heads == 0
    assert after.head_dim == spec.head_dim


def test_default_split_takes_width_and_some_depth() -> None:
    spec = make_spec()
    shape = solve_shape(spec, PruneRequest(ratio=0.3))
    assert shape.num_layers == 15  # int(16 * 0.3 / 4) = 1 layer
    assert shape.num_kv_heads == 8 and shape.num_heads < 32  # GQA: query heads pruned inside each group
    assert shape.intermediate_size < 8192


def test_shallow_model_keeps_all_layers() -> None:
    spec = make_spec(layers=4, heads=4, kv=2, inter=512, hidden=256)
    shape = solve_shape(spec, PruneRequest(ratio=0.25))
    assert shape.num_layers == 4


def test_explicit_knobs_without_ratio() -> None:
    spec = make_spec()
    shape = solve_shape(spec, PruneRequest(heads=0.5, mlp=0.25, layers=2))
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.intermediate_size) == (14, 16, 8, 6144)


def test_ratio_with_fixed_layers_solves_the_rest() -> None:
    spec = make_spec()
    shape = solve_shape(spec, PruneRequest(ratio=0.4, layers=4))
    assert shape.num_layers == 12
    after = pruned_spec(spec, PruneRequest(ratio=0.4, layers=4))
    assert 1 - after.num_non_embedding_parameters / spec.num_non_embedding_parameters == pytest.approx(0.4, abs=0.01)


def test_ratio_with_fixed_mlp_picks_heads() -> None:
    spec = make_spec()
    shape = solve_shape(spec, PruneRequest(ratio=0.3, mlp=0.3, layers=0))
    assert shape.intermediate_size == 5632 and shape.num_layers == 16
    assert shape.num_heads in feasible_head_counts(spec)


def test_multi_head_attention_prunes_whole_heads() -> None:
    spec = make_spec(heads=16, kv=16)
    shape = solve_shape(spec, PruneRequest(heads=0.25))
    assert shape.num_heads == shape.num_kv_heads == 12


def test_gqa_head_counts_stay_multiples_of_kv_heads() -> None:
    spec = make_spec(heads=32, kv=8)
    assert feasible_head_counts(spec) == [32, 24, 16, 8]


@pytest.mark.parametrize("request_, error", [
    (PruneRequest(ratio=1.2), ConfigError), (PruneRequest(heads=-0.1), ConfigError),
    (PruneRequest(layers=-1), ConfigError), (PruneRequest(layers=16), PassError),
    (PruneRequest(ratio=0.2, heads=0.1, mlp=0.1, layers=1), ConfigError),
])
def test_bad_requests_name_the_value(request_: PruneRequest, error: type) -> None:
    with pytest.raises(error) as info:
        solve_shape(make_spec(), request_)
    assert info.value.hint
