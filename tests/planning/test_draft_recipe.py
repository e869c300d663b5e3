"""``optimize --draft-for``'s passes from a config alone: the default draft keeps a quarter of the layers, the
user's prune knobs set another size, and a draft as large as its target, or flags a draft cannot be made with,
are refused naming the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.errors import ConfigError
from edgeopt.sources.model_spec import spec_from_config
from edgeopt.planning import Compression, check_draft_flags
from edgeopt.planning.draft_recipe import draft_recipe


def make_spec(layers: int = 30, architecture: str = "LlamaForCausalLM"):
    """SmolLM2-135M's shape (30 layers, 9 heads over 3 KV heads, MLP 1536, tied 49152-token embeddings)."""
    return spec_from_config({"architectures": [architecture], "vocab_size": 49152, "hidden_size": 576,
                             "intermediate_size": 1536, "num_hidden_layers": layers, "num_attention_heads": 9,
                             "num_key_value_heads": 3, "tie_word_embeddings": True}, "smollm2")


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text("some text\n")
    return path


@pytest.mark.parametrize("layers, kept", [(30, 8), (4, 1), (2, 1), (1, 1)])
def test_the_default_draft_keeps_a_quarter_of_the_layers(layers: int, kept: int, data: Path) -> None:
    if layers == 1:  # nothing to remove: the default cannot make a smaller draft, and says so
        with pytest.raises(ConfigError, match="as large as its target"):
            draft_recipe(make_spec(layers), Compression(None, None, None, None, None, data, 10))
        return
    recipe = draft_recipe(make_spec(layers), Compression(None, None, None, None, None, data, 10))
    (prune, prune_params), (distil, distil_params) = recipe.passes
    assert (prune, distil) == ("prune", "distil") and prune_params["layers"] == layers - kept
    assert recipe.draft.num_layers == kept and recipe.draft.intermediate_size == 1536 and recipe.draft.num_heads == 9
    assert distil_params["steps"] == 10 and distil_params["data"] == str(data.resolve())
    assert f"{kept} of {layers} layers" in recipe.describe()


def test_the_smollm2_default_is_well_under_half_the_target(data: Path) -> None:
    recipe = draft_recipe(make_spec(), Compression(None, None, None, None, None, data, 10))
    assert recipe.draft.num_parameters < 0.45 * recipe.target.num_parameters
    assert "--prune-layers 22" in recipe.describe() and "42% of the target's 134.5M" in recipe.describe()


def test_the_users_prune_knobs_set_the_size(data: Path) -> None:
    deeper = draft_recipe(make_spec(), Compression(None, None, None, 20, None, data, 10))
    assert deeper.draft.num_layers == 10 and deeper.passes[0][1]["layers"] == 20
    narrower = draft_recipe(make_spec(), Compression(0.5, None, None, None, None, data, 10))
    assert narrower.passes[0][1]["ratio"] == 0.5 and "layers" not in narrower.passes[0][1]
    assert narrower.draft.num_non_embedding_parameters == pytest.approx(
        0.5 * narrower.target.num_non_embedding_parameters, rel=0.05)


def test_a_model_whose_depth_is_fixed_gets_a_narrower_draft(data: Path) -> None:
    recipe = draft_recipe(make_spec(architecture="SmolLM3ForCausalLM"), Compression(None, None, None, None, None, data, 10))
    assert recipe.passes[0][1] == {"ratio": 0.75, **{k: v for k, v in recipe.passes[0][1].items() if k != "ratio"}}
    assert recipe.draft.num_layers == 30 and recipe.draft.intermediate_size < 1536


def test_a_draft_as_large_as_its_target_is_refused(data: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        draft_recipe(make_spec(), Compression(None, None, None, 0, None, data, 10))
    assert "--prune-layers 0 leaves the draft as large as its target" in refused.value.message
    assert "--prune-layers 22 (keeps 8" in refused.value.hint


@pytest.mark.parametrize("overrides, message, fix", [
    ({"model": "other"}, "MODEL other given with --draft-for", "edgeopt optimize --draft-for"),
    ({"fmt": "onnx"}, "--format onnx with --draft-for", "drop --format"),
    ({"fit": True}, "--fit with --draft-for", "--prune-layers N"),
    ({"accept_quality_loss": True}, "not held to the quality floor", "drop --accept-quality-loss"),
    ({"distil": False}, "--no-distil with --draft-for", "--distil-data FILE"),
    ({"distil_data": None}, "no --distil-data was given", "last 8192 tokens are held out"),
    ({"eval_data": "same"}, "is the --distil-data file", "drop --eval-data"),
])
def test_flags_a_draft_cannot_be_made_with_are_refused(overrides: dict, message: str, fix: str, data: Path) -> None:
    flags = {"model": None, "target": "smollm2", "fmt": None, "fit": False, "accept_quality_loss": False,
             "distil": None, "distil_data": data, "eval_data": None}
    flags |= {k: (data if v == "same" else v) for k, v in overrides.items()}
    with pytest.raises(ConfigError) as refused:
        check_draft_flags(**flags)
    assert message in refused.value.message and fix in refused.value.hint


def test_gguf_and_other_eval_text_are_accepted(data: Path, tmp_path: Path) -> None:
    check_draft_flags(None, "smollm2", "gguf", False, False, True, data, tmp_path / "other.txt")
