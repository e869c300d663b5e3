from __future__ import annotations

import pytest

from edgeopt.progress import counted, progress


def test_progress_passes_items_through_with_or_without_a_bar(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    assert list(progress(range(5), "off")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    assert list(progress(iter(range(5)), "on", total=5)) == [0, 1, 2, 3, 4]


def test_a_counted_bar_takes_counts_as_they_come_and_is_silent_when_off(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    with counted("off") as update:
        update(1, 19)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    with counted("on") as update:  # the total is known only with the first count (ninja's [1/19])
        update(1, 19)
        update(19, 19)


def test_off_a_terminal_each_step_prints_one_line_when_it_ends(monkeypatch: pytest.MonkeyPatch, capsys):
    """A log shows where the minutes went (a line per step, not per item); --quiet silences it."""
    monkeypatch.delenv("EDGEOPT_PROGRESS", raising=False)  # pytest's stderr is no terminal
    assert list(progress(range(3), "importance matrix: calibration chunks")) == [0, 1, 2]
    for item in progress(range(10), "evaluation text"):
        if item == 3:
            break  # a step that ends early still says what it did
    with counted("quantizing to Q4_K_M") as update:
        update(147, 147)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" in ")[0] for line in lines] == ["importance matrix: calibration chunks: 3/3",
                                                         "evaluation text: 3/10", "quantizing to Q4_K_M: 147/147"]
    assert all(line.endswith("s") for line in lines)
    from edgeopt.progress import quiet

    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")  # so that the variable quiet() sets is restored after the test
    quiet()
    list(progress(range(3), "silent"))
    with counted("silent") as update:
        update(1, 1)
    assert capsys.readouterr().err == ""


def test_optimize_quiet_turns_progress_off(monkeypatch: pytest.MonkeyPatch):
    import os

    from typer.testing import CliRunner

    from edgeopt.cli.app import app

    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")  # restored after the test, whatever --quiet set
    result = CliRunner().invoke(app, ["optimize", "--quiet", "--help"])
    assert result.exit_code == 0 and "--quiet" in result.output
    monkeypatch.setattr("edgeopt.optimize.options.resolve", lambda opts: (_ for _ in ()).throw(SystemExit(0)))
    CliRunner().invoke(app, ["optimize", "some-model", "--quiet"])
    assert os.environ.get("EDGEOPT_PROGRESS") == "0"


def test_a_stage_without_a_count_says_how_long_it_took_or_shows_a_spinner(monkeypatch: pytest.MonkeyPatch, capsys):
    from edgeopt.progress import stage

    monkeypatch.delenv("EDGEOPT_PROGRESS", raising=False)
    with stage("onnx: export in float32 (optimum)"):
        pass
    line = capsys.readouterr().err.strip()
    assert line.startswith("onnx: export in float32 (optimum): done in ") and line.endswith("s")
    monkeypatch.setenv("EDGEOPT_PROGRESS", "0")
    with stage("silent"):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("EDGEOPT_PROGRESS", "1")
    with stage("spinner"):
        pass
