"""``edgeopt bench serve --json-schema``: the free/constrained comparison against a live fake server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.bench.schema_bench import compare_with_schema, read_schema
from edgeopt.errors import ConfigError
from tests.server.conftest import MODEL, serve_fake  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(120)
SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 100}


def test_comparison_reports_paired_ratios_and_grammar_costs(serve_fake):  # noqa: F811
    live = serve_fake(step_delay_s=0.002)
    result = compare_with_schema(live.url, MODEL, streams=2, requests=2, prompt_tokens=4, max_tokens=12,
                                 schema=SCHEMA, report=lambda _line: None)
    assert len(result["round_ratios"]) == result["rounds"] and result["schema_over_free"] > 0
    assert result["grammar_steps"] >= result["rounds"] * 11  # every constrained decode step computed masks
    assert result["mask_ms_per_step"] > 0 and result["wait_ms_per_step"] >= 0 and result["apply_ms_per_step"] > 0
    # The load is greedy: every constrained pick is checked after sampling, the refused ones get masks.
    assert 0 < result["refused_per_step"] <= result["checked_per_step"] <= 2
    assert 0 < result["redo_ms_per_step"] <= result["apply_ms_per_step"] and 0 < result["refused_share"] <= 1


def test_a_schema_the_server_refuses_stops_the_comparison(serve_fake):  # noqa: F811
    live = serve_fake()
    with pytest.raises(ConfigError, match="not"):
        compare_with_schema(live.url, MODEL, streams=1, requests=1, prompt_tokens=1, max_tokens=2,
                            schema={"not": {}}, report=lambda _line: None)


def test_read_schema_refuses_what_is_not_a_schema_object(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text(json.dumps([1]))
    (tmp_path / "broken.json").write_text("{")
    for name in ("list.json", "broken.json"):
        with pytest.raises(ConfigError, match=name):
            read_schema(tmp_path / name)
