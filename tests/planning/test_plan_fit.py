"""--fit: the smallest prune ratio whose pruned model's plan fits the target."""

from __future__ import annotations

import pytest

from edgeopt.errors import DoesNotFitError
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.fit import fit_prune_ratio, plan_after_passes, plan_fits
from edgeopt.planning.prune_shape import PruneRequest, pruned_spec
from edgeopt.planning.checkpoint import make_plan
from edgeopt.profiles import load_profile


def big_spec():
    # ~9B parameters (Llama-3-8B-like widths, 40 layers): does not fit a 4 GB Pi even at Q4_0.
    return spec_from_config({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
                             "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "max_position_embeddings": 8192}, "big")


def test_fit_finds_the_smallest_fitting_ratio() -> None:
    pi = load_profile("raspberry-pi-5-4gb")
    spec = big_spec()
    assert not plan_fits(make_plan(spec, pi, 2048, 1, formats=("gguf",)), None)
    ratio, after = fit_prune_ratio(spec, pi, "gguf", None, 2048, 1)
    assert 0 < ratio < 0.9
    assert plan_fits(make_plan(after, pi, 2048, 1, formats=("gguf",)), None)
    smaller = pruned_spec(spec, PruneRequest(ratio=round(ratio - 0.01, 4)))
    assert not plan_fits(make_plan(smaller, pi, 2048, 1, formats=("gguf",)), None)


def test_plan_after_passes_adds_prune_with_distil_data() -> None:
    pi = load_profile("raspberry-pi-5-4gb")
    passes = [("distil", {"data": "/tmp/x.txt", "data_sha256": "abc", "steps": 10})]
    result = plan_after_passes(big_spec(), pi, "gguf", None, 2048, 1, passes, fit=True)
    assert result.fit_ratio is not None and result.plan.recommended is not None
    assert [name for name, _ in result.passes] == ["prune", "distil"]
    assert result.passes[0][1]["ratio"] == result.fit_ratio
    assert result.passes[0][1]["calib_data"] == "/tmp/x.txt"


def test_fit_not_needed_changes_nothing_and_drops_pointless_distil() -> None:
    host = load_profile("jetson-agx-orin-64gb")
    passes = [("distil", {"data": "/tmp/x.txt", "steps": 10})]
    result = plan_after_passes(big_spec(), host, "gguf", None, 2048, 1, passes, fit=True)
    assert result.fit_ratio is None and result.passes == []


def test_explicit_prune_is_planned_without_fit() -> None:
    pi = load_profile("raspberry-pi-5-4gb")
    result = plan_after_passes(big_spec(), pi, "gguf", None, 2048, 1, [("prune", {"ratio": 0.7})], fit=False)
    assert result.spec.num_parameters < big_spec().num_parameters
    assert result.fit_ratio is None


def test_hopeless_fit_says_so() -> None:
    tiny_device = load_profile("raspberry-pi-5-4gb")
    with pytest.raises(DoesNotFitError) as info:
        fit_prune_ratio(big_spec(), tiny_device, "gguf", None, 2048, 1000)
    assert "even pruned" in info.value.message and info.value.hint


def test_resolve_with_fit_prunes_and_plans_the_pruned_model(tmp_path) -> None:
    import json

    from edgeopt.optimize.pipeline import OptimizeOptions, resolve

    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
              "num_key_value_heads": 8, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))  # the planner reads config.json only
    opts = OptimizeOptions(model=str(tmp_path), target="raspberry-pi-5-4gb", context=2048, fit=True, dry_run=True)
    res = resolve(opts)
    assert res.fit_ratio is not None and res.passes[0][0] == "prune"
    assert res.plan.recommended is not None and res.quant == res.plan.recommended.quant
    with pytest.raises(DoesNotFitError, match="--fit"):
        resolve(OptimizeOptions(model=str(tmp_path), target="raspberry-pi-5-4gb", context=2048, dry_run=True))
