"""README.md is what a newcomer copies from: every command it shows must exist as shown.

Each ``edgeopt ...`` line of its shell blocks is parsed by the real CLI (the subcommand exists, every
option is one it takes, values have the right types); each ``make`` target exists; each pytest path
exists. The architectures it lists are the ones tests/architectures takes end to end."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main

from edgeopt.cli.app import app
from tests.architectures.catalog import ARCHITECTURES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def shell_lines() -> list[str]:
    """Every command line in the README's ```bash blocks, comments and continuations removed."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        pending = ""
        for raw in block.splitlines():
            line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line:
                lines.append(line)
    return lines


def edgeopt_commands() -> list[list[str]]:
    return [shlex.split(line)[1:] for line in shell_lines() if line.startswith("edgeopt ")]


def test_the_readme_shows_the_main_commands():
    shown = {args[0] for args in edgeopt_commands()}
    assert {"plan", "optimize", "serve", "inspect"} <= shown
    assert "make demo" in shell_lines() and "make test" in shell_lines()


@pytest.mark.parametrize("args", edgeopt_commands(), ids=lambda args: " ".join(args)[:60])
def test_every_edgeopt_command_parses(args: list[str], tmp_path: Path):
    command: Any = typer.main.get_command(app)  # typer carries its own click: duck-typed
    path: list[str] = []
    while hasattr(command, "commands"):
        assert args, f"edgeopt {' '.join(path)} needs a subcommand"
        name, args = args[0], args[1:]
        assert name in command.commands, f"README shows `edgeopt {' '.join([*path, name])}`: no such command"
        command, path = command.commands[name], [*path, name]
    # FILE stands for a file the reader has: give it one, for options that check the file exists.
    existing = tmp_path / "placeholder.txt"
    existing.write_text("{}")
    args = [str(existing) if a == "FILE" else a for a in args]
    try:
        command.make_context(f"edgeopt {' '.join(path)}", list(args))
    except Exception as exc:  # a usage error: unknown option, bad value, missing argument
        message = exc.format_message() if hasattr(exc, "format_message") else repr(exc)
        pytest.fail(f"README's `edgeopt {' '.join(path)} {' '.join(args)}` does not parse: {message}")


@pytest.mark.parametrize("line", [line for line in shell_lines() if line.startswith("make ")])
def test_every_make_target_exists(line: str):
    target = shlex.split(line)[1]
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True)
    assert "No rule to make target" not in dry.stderr, f"README shows `{line}`: {dry.stderr}"


@pytest.mark.parametrize("line", [line for line in shell_lines() if "-m pytest" in line])
def test_every_pytest_path_exists(line: str):
    paths = [word for word in shlex.split(line) if word.startswith("tests")]
    for path in paths:
        assert (ROOT / path.split("::")[0]).exists(), f"README shows `{line}`: {path} does not exist"


# tests/architectures entry name -> the words the README's list uses for it
_README_NAMES = {"llama3.2": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                 "phi3-mini": "Phi-3", "phi3.5": "Phi-3.5", "phi4-mini": "Phi-4-mini", "granite3": "Granite 3",
                 "smollm3": "SmolLM3", "gemma2": "Gemma 2", "gemma3": "Gemma 3"}


def test_the_architectures_listed_are_the_ones_tested():
    section = README.split("## Supported", 1)[1].split("\n## ", 1)[0]
    tested = {arch.name for arch in ARCHITECTURES}
    unknown = tested - set(_README_NAMES)
    assert not unknown, f"tests/architectures has {unknown}: add them to the README's list and to this map"
    for name in sorted(tested):
        assert _README_NAMES[name] in section, f"README's supported architectures omit {_README_NAMES[name]} ({name})"
