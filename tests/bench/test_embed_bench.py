"""`edgeopt bench embed` against a live `edgeopt serve` of a tiny ONNX encoder bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeopt.bench.embed_bench import request_texts
from edgeopt.cli.app import app
from edgeopt.errors import ConfigError

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()


def test_request_texts_differ_between_requests_and_have_the_asked_length() -> None:
    first, second = request_texts(0, 2, 5), request_texts(1, 2, 5)
    assert len(first) == 2 and all(len(text.split()) == 5 for text in first + second)
    assert set(first).isdisjoint(second)


def test_bench_embed_reports_every_level(encoder_fp32_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "embed.json"
    result = runner.invoke(app, ["bench", "embed", str(encoder_fp32_bundle), "-n", "1,4", "--requests", "8",
                                 "--texts", "2", "--words", "6", "--threads", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [level["concurrency"] for level in report["levels"]] == [1, 4]
    for level in report["levels"]:
        assert level["ok"] == 8 and level["errors"] == 0 and level["latency"]["count"] == 8
        assert level["texts_per_s"] == pytest.approx(2 * level["requests_per_s"], rel=0.01)
    assert report["server_rss_bytes"] > 0 and "texts/s" in result.output


def test_bench_serve_on_an_embedding_bundle_points_at_bench_embed(encoder_fp32_bundle: Path) -> None:
    result = runner.invoke(app, ["bench", "serve", str(encoder_fp32_bundle)])
    assert isinstance(result.exception, ConfigError)  # printed as "error: ... / fix: ..." by the CLI's main
    assert "embedding bundle" in str(result.exception) and "edgeopt bench embed" in result.exception.hint
