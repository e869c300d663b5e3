"""The CLI as a user sees it in a real terminal (a pty of 80x24 and 120x40) and in a pipe: every
command's ``--help`` shows every option name whole, and ``edgeopt plan`` every candidate name whole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from edgeopt.cli.app import app
from tests.fixtures.terminal import run_in_terminal

SIZES = [(80, 24), (120, 40)]
CUT = "…"  # rich's mark where it shortened a cell
# Prints every command's --help in one process, each after a marker line, so one pty run covers all.
_ALL_HELP = """
import sys, typer.main
from edgeopt.cli.app import app
root = typer.main.get_command(app)
def walk(cmd, path):
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from walk(sub, path + [name])
for path in walk(root, []):
    print("=== " + " ".join(path) + " ===", flush=True)
    try:
        root.main(path + ["--help"], prog_name="edgeopt", standalone_mode=False)
    except SystemExit:
        pass
    sys.stdout.flush()
"""


def commands() -> dict[str, Any]:
    """Every command of the app by its path ("" for the root, "bench serve"), walked from typer's tree."""
    found: dict[str, Any] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        found[" ".join(path)] = cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def option_names(command: Any) -> list[str]:
    """Every flag spelling of the command's options (typer carries its own click: duck-typed)."""
    return [name for p in command.params if p.param_type_name == "option" for name in (*p.opts, *p.secondary_opts)]


def shows_whole(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def help_sections(text: str) -> dict[str, str]:
    parts = re.split(r"^=== (.*?) ===$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_every_help_shows_every_option_name_whole(columns: int, rows: int):
    code, text = run_in_terminal([sys.executable, "-c", _ALL_HELP], columns, rows)
    assert code == 0, text[-2000:]
    sections = help_sections(text)
    expected = commands()
    assert set(sections) == set(expected), "a command printed no help"
    assert {"serve", "optimize", "plan", "bench serve"} <= set(expected)
    assert len(option_names(expected["serve"])) > 20  # the check below has names to check
    for path, command in expected.items():
        shown = sections[path]
        assert CUT not in shown, f"edgeopt {path} --help at {columns} columns cuts a cell:\n{shown}"
        for name in option_names(command):
            assert shows_whole(name, shown), f"edgeopt {path} --help at {columns} columns: {name} not whole\n{shown}"
        too_wide = [line for line in shown.splitlines() if len(line) > columns]
        assert not too_wide, f"edgeopt {path} --help wider than {columns} columns: {too_wide[:3]}"


def test_help_in_a_pipe_is_plain():
    """No rich panels or colour codes where stdout is not a terminal (CI logs, | less, > file)."""
    out = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "serve", "--help"], capture_output=True, text=True,
                         check=True, env={**_env(), "COLUMNS": "200"}).stdout
    assert "\x1b[" not in out and "╭" not in out and "│" not in out
    assert all(shows_whole(name, out) for name in option_names(commands()["serve"]))


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS")}


def _plan_labels(model: Path, target: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "plan", str(model), "--target", target, "--json"],
                         capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)
    return [f"{c['format']}:{c['quant']}" for c in plan["candidates"]]


@pytest.mark.parametrize(("columns", "rows"), SIZES)
def test_plan_shows_every_candidate_whole(demo_model_dir: Path, columns: int, rows: int):
    labels = _plan_labels(demo_model_dir, "raspberry-pi")
    assert len(labels) >= 6
    code, text = run_in_terminal([sys.executable, "-m", "edgeopt.cli.app", "plan", str(demo_model_dir),
                                  "--target", "raspberry-pi"], columns, rows)
    assert code == 0, text
    assert CUT not in text, text
    for label in labels:
        whole = re.search(rf"(?<![\w:-])\*?{re.escape(label)}(?![\w-])", text)
        assert whole, f"{label} not whole at {columns}:\n{text}"
    assert all(len(line) <= columns for line in text.splitlines()), text
    assert "recommended: gguf:" in text


def test_plan_in_a_pipe_is_one_plain_line_per_candidate(demo_model_dir: Path):
    labels = _plan_labels(demo_model_dir, "jetson")
    out = subprocess.run([sys.executable, "-m", "edgeopt.cli.app", "plan", str(demo_model_dir), "--target", "jetson"],
                         capture_output=True, text=True, check=True, env=_env()).stdout
    lines = out.splitlines()
    assert "\x1b[" not in out and "┃" not in out and "│" not in out
    header = next(line for line in lines if line.startswith("candidate"))
    assert all(h in header for h in ("weights MiB", "KV capacity tok", "max seqs @ctx", "fits"))
    rows = [line for line in lines if line.lstrip("*").split(" ")[0] in labels]
    assert [row.split()[0].lstrip("*") for row in rows] == labels
