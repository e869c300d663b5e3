"""KV cache types in the planner: bytes per token by hand, the ~1.9x of q8_0, the tight-memory rule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.errors import ConfigError
from edgeopt.sizing.kv_types import kv_element_bytes, parse_kv_type
from edgeopt.sizing.budget import kv_bytes_per_token
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning.checkpoint import make_plan, size_candidate
from edgeopt.profiles import load_profile, profile_from_dict
from tests.planning.test_plan import QWEN_05B, profile

# Phi-2's attention: head_dim 2560 / 32 = 80, not a whole number of 32-element blocks.
PHI_LIKE = {**QWEN_05B, "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 32,
            "intermediate_size": 10240}


def test_qwen_kv_bytes_per_token_by_hand_for_each_type():
    spec = spec_from_config(QWEN_05B, "qwen")
    elements = 2 * 24 * 2 * 64  # K and V x layers x KV heads x head_dim = 6144
    assert spec.kv_elements_per_token == elements
    # f16: 2 bytes each; q8_0: 192 blocks of 32 at 34 bytes; q4_0: 192 blocks at 18 bytes
    assert [kv_bytes_per_token(elements, kv_element_bytes(t)) for t in ("f16", "q8_0", "q4_0")] == [12288, 6528, 3456]
    sized = {t: size_candidate(spec, profile(8, 1.5), "gguf", "Q8_0", 4096, 1, kv_type=t) for t in ("f16", "q8_0")}
    assert (sized["f16"].kv_bytes_per_token, sized["q8_0"].kv_bytes_per_token) == (12288, 6528)
    # Same memory, more tokens in it; an f16 cache in the streams layout also reserves plain attention's scores
    # (edgeopt.sizing.attention: 128 batch tokens x 4,096 cells x 14 heads x 4 bytes), a quantized one cannot use it.
    assert (sized["f16"].kv_layout, sized["q8_0"].kv_layout) == ("streams", "streams")
    assert sized["q8_0"].kv_budget_bytes - sized["f16"].kv_budget_bytes == 128 * 4096 * 14 * 4


def test_q8_0_holds_about_1_9x_the_sequences_in_edgeopt_plan(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN_05B))
    runner = CliRunner()
    plans = {}
    for kv_type in ("f16", "q8_0", "q4_0"):
        result = runner.invoke(app, ["plan", str(tmp_path), "--target", "jetson-orin-nano-8gb", "--context", "4096",
                                     "--kv-type", kv_type, "--json"])
        assert result.exit_code == 0, result.output
        plans[kv_type] = {c["quant"]: c for c in json.loads(result.output)["candidates"] if c["format"] == "gguf"}
    f16, q8, q4 = (plans[t]["Q4_K_M"] for t in ("f16", "q8_0", "q4_0"))
    assert (f16["kv_type"], q8["kv_type"], q4["kv_type"]) == ("f16", "q8_0", "q4_0")
    # 1.882 in the same budget (f16's is smaller by plain attention's score buffer, which q8_0 cannot use)
    budgets = q8["kv_budget_bytes"] / f16["kv_budget_bytes"]
    assert q8["kv_token_capacity"] / f16["kv_token_capacity"] == pytest.approx(budgets * 2 / (34 / 32), rel=1e-3)
    assert 1.85 <= q8["max_concurrency"] / f16["max_concurrency"] <= 1.95, (f16, q8)
    assert 3.4 <= q4["max_concurrency"] / f16["max_concurrency"] <= 3.6, (f16, q4)
    onnx = next(c for c in json.loads(result.output)["candidates"] if c["format"] == "onnx")
    assert onnx["kv_type"] is None  # --kv-type sizes gguf candidates only: onnxruntime's KV dtype is fixed


def test_tight_memory_switches_the_kv_cache_to_the_profiles_type():
    spec = spec_from_config(QWEN_05B, "qwen")
    roomy = make_plan(spec, profile(8, 1.5), context=4096, concurrency=4, formats=("gguf",))
    assert {c.kv_type for c in roomy.candidates} == {"f16"}  # f16 holds 4 x 4096 tokens: no reason to quantize
    # 1.1 GiB usable: Q8_0 weights + 12 x 4096 tokens of f16 KV (576 MiB) do not fit; in q8_0 (306 MiB) they do.
    tight = make_plan(spec, profile(1.6, 0.5), context=4096, concurrency=12, formats=("gguf",))
    q8 = next(c for c in tight.candidates if c.quant == "Q8_0")
    assert q8.kv_type == "q8_0" and q8.fits
    assert tight.recommended == q8  # the profile's default quant, kept by quantizing the KV cache instead
    strict = dataclasses.replace(profile(1.6, 0.5), tight_memory_kv_type="f16")
    q8_strict = next(c for c in make_plan(spec, strict, context=4096, concurrency=12, formats=("gguf",)).candidates
                     if c.quant == "Q8_0")
    assert q8_strict.kv_type == "f16" and not q8_strict.fits
    assert {load_profile(name).tight_memory_kv_type for name in ("raspberry-pi-5-4gb", "x86-64-cpu")} == {"q8_0"}


def test_head_dims_that_are_not_whole_blocks_keep_f16_or_are_refused():
    spec = spec_from_config(PHI_LIKE, "phi-like")
    assert spec.head_dim == 80
    tight = make_plan(spec, profile(1.6, 0.5), context=4096, concurrency=12, formats=("gguf",))
    assert {c.kv_type for c in tight.candidates} == {"f16"}  # the rule never picks a type llama.cpp would refuse
    with pytest.raises(ConfigError) as err:
        make_plan(spec, profile(8, 1.5), context=4096, formats=("gguf",), kv_type="q8_0")
    assert "key head dim 80" in err.value.message and "--kv-type f16" in err.value.hint


@pytest.mark.parametrize("fmt", ["onnx", "torch"])
def test_kv_type_is_refused_for_onnx_and_torch_with_the_reason(fmt: str):
    with pytest.raises(ConfigError) as err:
        parse_kv_type("q8_0", fmt)
    assert "applies to gguf bundles only" in err.value.message and f"{fmt} bundles run on" in err.value.message
    assert "one fixed dtype" in err.value.message
    assert "--format gguf" in err.value.hint


def test_unknown_kv_type_names_the_valid_ones():
    assert parse_kv_type(" Q8_0 ", "gguf") == "q8_0"
    with pytest.raises(ConfigError) as err:
        parse_kv_type("q5_1", "gguf")
    assert "'q5_1'" in err.value.message and "f16, q8_0, q4_0" in err.value.hint


def test_a_profile_with_an_unknown_tight_memory_kv_type_is_refused():
    data = load_profile("x86-64-cpu").to_fields() | {"tight_memory_kv_type": "int8"}
    with pytest.raises(ConfigError) as err:
        profile_from_dict(data, "custom.toml")
    assert "tight_memory_kv_type='int8'" in err.value.message
