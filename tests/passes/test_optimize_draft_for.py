"""``edgeopt optimize --draft-for TARGET`` end to end on the tiny random model: a GGUF bundle of a quarter of the
target's layers, pruned and distilled, whose manifest and output give its acceptance on held-out text; serve's
loader takes it as the draft of the target (the vocabulary check passes) and greedy output with it is the
target's alone (tests/runtimes/test_llama_cpp_draft.py's check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.app import app
from edgeopt.sources.model_source import open_model_source
from edgeopt.server.startup.draft import plan_with_draft
from edgeopt.server.startup.launcher import ServeOptions, load_served_model
from tests.runtimes.test_llama_cpp_draft import check_greedy_equality, prior_step_cost  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def draft_bundle(tiny_model_factory, corpus_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("draft") / "draft"
    args = ["optimize", "--draft-for", str(tiny_model_factory("llama-gqa")), "--distil-data", str(corpus_file),
            "--distil-steps", "2", "--quant", "F16", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out, result.output


def test_the_draft_is_a_pruned_distilled_gguf_with_its_acceptance(draft_bundle: tuple[Path, str],
                                                                  tiny_model_factory) -> None:
    out, output = draft_bundle
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "gguf" and manifest["source_model"] == str(tiny_model_factory("llama-gqa"))
    prune, distil = manifest["passes"]
    assert (prune["name"], prune["params"]["layers"], distil["name"]) == ("prune", 1, "distil")
    assert prune["metrics"]["shape_after"]["num_layers"] == 1
    draft = manifest["metrics"]["draft"]
    assert draft["held_out_text"].endswith("(held-out tail)") and draft["contexts"] >= 8
    assert draft["parameters"] < draft["target_parameters"] and draft["draft_tokens"] == 4
    assert 0 <= draft["acceptance"] <= 1 and set(draft["by_draft_tokens"]) == {"1", "2", "4", "8"}
    assert "quality_floor" not in manifest["metrics"]  # a draft is measured by its acceptance instead
    assert "draft of " in output and "1 of 2 layers" in output and f"would accept {draft['acceptance']:.0%} of its tokens at 4 a step" in output


def test_serve_takes_it_as_the_targets_draft(draft_bundle: tuple[Path, str], tiny_gguf_factory) -> None:
    out, _ = draft_bundle
    target = open_model_source(tiny_gguf_factory("llama-gqa", "F16"))
    options = ServeOptions(memory_bytes=1024**3, context=512, max_concurrency=2, threads=1, draft=out,
                           speculative="draft")
    shape, draft = plan_with_draft(target.bundle_dir, target.manifest, options.shape_request(), out, 4,
                                   options.memory_bytes, "host", verify=True)
    served = load_served_model(target.bundle_dir, target.manifest, shape, options, draft=draft)  # checks vocabularies
    served.close()


def test_greedy_output_with_the_draft_is_the_targets(draft_bundle: tuple[Path, str], tiny_gguf_factory) -> None:
    out, _ = draft_bundle
    texts = [f"def function_{i}(value):\n    return value * {i}\n" for i in range(3)]
    engine = check_greedy_equality(tiny_gguf_factory("llama-gqa", "F16"), out / load_bundle(out).model_file, texts, 24)
    assert engine.stats().speculative_drafted_total.get("draft", 0) > 0


def test_optimize_without_model_or_draft_for_says_both(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli.test_cli import run_main

    code, output = run_main(["optimize"], capsys, monkeypatch)
    assert code != 0 and "edgeopt optimize needs MODEL" in output and "--draft-for TARGET" in output
