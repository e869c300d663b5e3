"""A draft model's memory (serve --draft) is taken from the budget before the target's KV: the target keeps
less KV by at least the draft's weights and KV, the draft's cells follow the target's sequences, and
``edgeopt plan --draft`` shows both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.cli.app import app
from edgeopt.demo.smollm2 import smollm2_gguf_path
from edgeopt.sources.model_source import open_model_source
from edgeopt.sizing.bundle_facts import bundle_serving_shape
from edgeopt.sizing.draft import shape_beside_draft
from edgeopt.sizing.shape import ShapeRequest
from tests.fixtures.draft_models import requantized_smollm2

GIB = 1024**3


@pytest.fixture(scope="module")
def draft_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return requantized_smollm2(tmp_path_factory.mktemp("draft"), "Q4_0")


@pytest.mark.parametrize("sequences", [None, 2])
def test_the_draft_s_memory_comes_out_of_the_target_s_kv(draft_gguf: Path, sequences: int | None) -> None:
    target, draft = open_model_source(smollm2_gguf_path()), open_model_source(draft_gguf)
    request = ShapeRequest(context=1024, max_sequences=sequences)
    alone = bundle_serving_shape(target.bundle_dir, target.manifest, request, GIB)
    shape, plan = shape_beside_draft(target.bundle_dir, target.manifest, request, draft.bundle_dir, draft.manifest,
                                     4, GIB)
    freed_kv_bytes = (alone.sizing.kv_budget_bytes - shape.sizing.kv_budget_bytes)
    assert freed_kv_bytes >= plan.total_bytes - plan.runtime_bytes  # weights and KV at least, from the target's KV
    assert plan.weights_bytes == draft_gguf.stat().st_size
    assert plan.max_sequences == shape.max_sequences and plan.kv_cells >= shape.max_sequences * 4
    assert plan.kv_cells <= shape.kv_live_cells + shape.max_sequences * 4
    assert plan.context_length == shape.context_length + 4
    assert plan.runtime_options()["cache_slots"] == 0  # a draft keeps no prefix cache of its own


def test_plan_shows_the_draft_and_its_share(draft_gguf: Path) -> None:
    args = ["plan", str(smollm2_gguf_path()), "--draft", str(draft_gguf), "--memory", "1GiB", "--context", "1024",
            "-n", "2"]
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "draft model SmolLM2-135M-Instruct.Q4_0.gguf" in shown.output and "with the draft" in shown.output
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    draft = data["draft"]
    assert draft["weights_bytes"] == draft_gguf.stat().st_size and draft["max_sequences"] == 2
    assert data["candidates"][0]["fits"] is True
