"""The mix against llama.cpp's own types of the same size (exporters/gguf/mix/recipes.py): their types are among
the mix's choices, the lower measured KL decides what is written, and a written file never measures above the
best fitting recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.exporters.gguf.mix.recipes import Recipe, candidate_recipes, decide, extra_types, fitting


def recipe(name: str, size: int, types: dict[str, str] | None = None) -> Recipe:
    return Recipe(name, size, types or {})


def test_a_recipe_that_measures_lower_is_written_instead_of_the_mix_and_the_reason_names_both() -> None:
    verdict = decide(0.0162, {"Q5_K_M": 0.0072, "Q5_K_S": 0.0080})
    assert verdict.written == "Q5_K_M"
    assert "0.0072" in verdict.reason and "0.0162" in verdict.reason


def test_the_mix_is_written_when_it_measures_at_or_below_every_recipe() -> None:
    assert decide(0.02, {"Q4_K_M": 0.038, "Q4_K_S": 0.041}).written == "mix"
    assert decide(0.02, {"Q4_K_M": 0.02}).written == "mix"  # a tie keeps the mix: same loss, the size asked
    assert decide(0.02, {}).written == "mix"


def test_only_recipes_that_fit_compete_largest_first() -> None:
    recipes = [recipe("Q4_K_M", 100), recipe("Q5_K_M", 112), recipe("Q3_K_M", 90), recipe("Q4_K_S", 96)]
    assert [r.name for r in fitting(recipes, 100)] == ["Q4_K_M", "Q4_K_S", "Q3_K_M"]
    assert fitting(recipes, 89) == []


def test_every_type_a_fitting_recipe_gives_a_tensor_becomes_one_of_its_choices() -> None:
    # llama.cpp's Q5_K_M falls back to Q5_1 for 576-wide rows, a type the palette leaves out: without it the
    # mix lost 2.26x at Q5_K_M's size on SmolLM2.
    found = extra_types([recipe("Q5_K_M", 112, {"blk.0.attn_q.weight": "Q5_1", "blk.0.ffn_down.weight": "Q6_K"}),
                         recipe("Q5_K_S", 110, {"blk.0.attn_q.weight": "Q5_1", "blk.0.ffn_down.weight": "Q5_K"})])
    assert found == {"blk.0.attn_q.weight": {"Q5_1"}, "blk.0.ffn_down.weight": {"Q6_K", "Q5_K"}}


def test_recipes_estimated_well_over_the_budget_are_not_even_quantized() -> None:
    estimates = {"Q3_K_M": 90, "Q4_K_M": 100, "Q5_K_M": 112, "Q6_K": 138}
    assert candidate_recipes(estimates, 100) == ["Q3_K_M", "Q4_K_M"]
    assert candidate_recipes(estimates, 108) == ["Q3_K_M", "Q4_K_M", "Q5_K_M"]  # within the estimate's slack


@pytest.fixture(scope="module")
def maker(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path):
    """A model with 544-wide rows (where llama.cpp's Q5_K_M falls back to Q5_1, as for SmolLM2's 576), its costs
    measured on 2 chunks of calibration text."""
    from edgeopt.demo.corpus import stdlib_text
    from edgeopt.exporters.gguf.calibration import compute_imatrix
    from edgeopt.exporters.gguf.mix.build import MixMaker
    from edgeopt.exporters.gguf.writer import convert_checkpoint
    from tests.fixtures.tiny_models import build_tiny_model

    root = tmp_path_factory.mktemp("mix-recipes")
    model = build_tiny_model(root / "m", "llama-gqa", tiny_tokenizer_dir, hidden_size=256, intermediate_size=544,
                             num_layers=3)
    (root / "calibration.txt").write_text(stdlib_text(20_000))
    f16 = root / "f16.gguf"
    convert_checkpoint(model, f16, "F16")
    calibration = compute_imatrix(model, f16, root, {"calibration_data": root / "calibration.txt", "calibration_chunks": 2})
    (root / "work").mkdir()
    return MixMaker(f16, root / "work", calibration.matrix, calibration.chunks, n_layers=3, bands=1)  # 9 groups


def file_types(path: Path) -> dict[str, str]:
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_a_mix_at_a_recipes_size_never_measures_above_the_recipes_that_fit(maker, tmp_path: Path) -> None:
    """Whatever is written measures no higher than every fitting recipe, on the text both were measured on, and
    the manifest's types are the file's."""
    budget = maker.recipes(["Q5_K_M"])[0].bytes
    facts = maker.write(tmp_path / "mix.gguf", budget, ["Q4_K_M", "Q5_K_M"])["mix"]
    assert (tmp_path / "mix.gguf").stat().st_size <= budget
    assert set(facts["recipe_kl"]) == {"Q5_K_M", "Q4_K_M"}
    written_kl = maker.meter.kl(tmp_path / "mix.gguf")
    assert written_kl <= min(facts["recipe_kl"].values()) + 1e-9, facts
    if facts["written"] == "mix":
        assert facts["measured_kl"] == pytest.approx(written_kl, rel=1e-4)
    types = file_types(tmp_path / "mix.gguf")
    assert facts["types"] == {name: types[name] for name in facts["types"]}


def test_a_mix_whose_prediction_misleads_it_falls_back_to_the_best_llama_cpp_type(maker, tmp_path: Path) -> None:
    """Costs that call every type free (a prediction gone wrong) make the mix pick the smallest types; measured
    against llama.cpp's Q8_0 and Q6_K at Q8_0's size it loses, and the better of those two is written, byte for
    byte what llama.cpp writes."""
    import dataclasses

    honest = maker.costs
    maker.costs = dataclasses.replace(honest, scales=dict.fromkeys(honest.scales, 0.0))
    try:
        budget = maker.recipes(["Q8_0"])[0].bytes
        facts = maker.write(tmp_path / "mix.gguf", budget, ["Q6_K", "Q8_0"])["mix"]
    finally:
        maker.costs = honest
    best = min(facts["recipe_kl"], key=facts["recipe_kl"].get)
    assert facts["written"] == best and facts["measured_kl"] > facts["recipe_kl"][best], facts
    assert best in facts["reason"] and facts["mix_types"] != facts["types"]
    recipe = maker.recipes([best])[0]
    assert (tmp_path / "mix.gguf").read_bytes() == maker.recipe_file(recipe).read_bytes()
    assert facts["types"] == recipe.types


def test_a_recipes_dry_run_states_the_types_and_size_of_the_file_llama_cpp_writes(maker) -> None:
    """The recipes are not quantized to learn their types and sizes (only those measured are): the dry run's
    figures are the file's, fallbacks (Q5_K_M's Q5_1 for 544-wide rows) included."""
    for found in maker.recipes(["Q3_K_S", "Q4_K_M", "Q5_K_M"]):
        path = maker.recipe_file(found)
        assert found.bytes == path.stat().st_size, found.name
        assert found.types == {name: types for name, types in file_types(path).items() if name in found.types}
        assert all(ttype in maker.costs.errors[name] for name, ttype in found.types.items())
    assert "Q5_1" in maker.recipes(["Q5_K_M"])[0].types.values()
