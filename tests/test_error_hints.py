"""Every ``--flag`` an error names is an option of a command that can raise that error.

The source is read with ``ast``: each call of an ``...Error`` class, its message and its hint (the constant
parts of f-strings included). A flag belongs to the command the text names before it ("edgeopt optimize
--format gguf"), else to the commands of the module's room (the serving core's errors reach ``serve``
users, the exporters' reach ``optimize`` users); modules every command uses may name any command's flag.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import typer

from edgeopt.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edgeopt", "exporters", "runtimes", "profiles")
SERVE = ("serve", "bench serve")  # `bench serve` starts the same server
# Module path prefix -> the commands whose users can see its errors (first match wins; no match: any command).
ROOMS = (
    ("edgeopt/server/", SERVE), ("edgeopt/engine/", SERVE), ("runtimes/", SERVE),
    ("exporters/", ("optimize",)), ("edgeopt/passes/", ("optimize",)), ("edgeopt/optimize/pipeline.py", ("optimize",)),
    ("edgeopt/optimize/export_options.py", ("optimize",)),
    ("edgeopt/sizing/", ("plan", "optimize", *SERVE)), ("edgeopt/plan", ("plan", "optimize")),
    ("edgeopt/evaluate", ("eval", "optimize")), ("edgeopt/commands/serve_cmd.py", ("serve",)),
    ("edgeopt/commands/optimize_cmd.py", ("optimize",)), ("edgeopt/commands/plan_cmd.py", ("plan",)),
    ("edgeopt/commands/monitor_cmd.py", ("monitor",)), ("edgeopt/commands/bench_cmd.py", ("bench serve",
                                                                                        "bench embed",
                                                                                        "bench schema")),
)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# A command line the text names: one of edgeopt's, or another tool's (whose flags are not ours to check).
COMMAND = re.compile(r"\bedgeopt (bench [a-z-]+|[a-z-]+)|\b(optimum-cli|llama-[a-z]+|nvidia-smi|pip)\b")


def command_flags() -> dict[str, set[str]]:
    """Every command of the CLI (``bench serve`` for sub-commands) -> its long options."""
    found: dict[str, set[str]] = {}

    def walk(command: object, path: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, [*path, name])
            return
        params = getattr(command, "params", [])
        found[" ".join(path)] = {opt for p in params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}

    walk(typer.main.get_command(app), [])
    return found


def _texts(node: ast.AST) -> Iterator[str]:
    """The literal text of a string expression: constants, f-string parts, concatenations, both branches."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        for part in node.values:
            yield from _texts(part)
    elif isinstance(node, ast.FormattedValue):
        yield from _texts(node.value)
    elif isinstance(node, ast.BinOp):
        yield from _texts(node.left)
        yield from _texts(node.right)
    elif isinstance(node, ast.IfExp):
        yield from _texts(node.body)
        yield from _texts(node.orelse)


def error_texts(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    """(module path, line, text) of every string given to an ``...Error(...)`` call."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), relative)):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name.endswith("Error"):
                    for arg in (*node.args, *(keyword.value for keyword in node.keywords)):
                        for text in _texts(arg):
                            yield relative, node.lineno, text


def owners(module: str, text: str, flag_at: int, commands: dict[str, set[str]]) -> tuple[str, ...]:
    """The commands ``text``'s flag at ``flag_at`` must belong to."""
    named = [m.group(1) or m.group(2) for m in COMMAND.finditer(text[:flag_at])
             if m.group(2) or m.group(1) in commands]
    if named:
        return (named[-1],) if named[-1] in commands else ()  # another tool's flag: nothing to check
    room = next((cmds for prefix, cmds in ROOMS if module.startswith(prefix)), tuple(commands))
    return tuple(c for c in room if c in commands)


def misnamed_flags(root: Path = ROOT) -> list[str]:
    commands = command_flags()
    wrong = []
    for module, line, text in error_texts(root):
        for match in FLAG.finditer(text):
            candidates = owners(module, text, match.start(), commands)
            if candidates and not any(match.group() in commands[c] for c in candidates):
                wrong.append(f"{module}:{line}: {match.group()} is not an option of {' or '.join(candidates)}")
    return wrong


def test_every_flag_an_error_names_is_an_option_of_a_command_that_raises_it() -> None:
    wrong = misnamed_flags()
    assert wrong == [], "errors name flags their command does not have:\n" + "\n".join(wrong)


def test_the_walk_sees_hints_in_f_strings_and_attributes_them_by_room_and_by_name(tmp_path: Path) -> None:
    """The checker itself: a serving-core hint naming a flag serve lacks is caught, one that names
    ``edgeopt optimize`` before an optimize flag is not, nor another tool's flag, and an f-string's literal
    parts are read."""
    (tmp_path / "runtimes").mkdir()
    (tmp_path / "runtimes" / "bad.py").write_text(
        'def f(n):\n'
        '    raise BackendError(f"{n} cells", f"lower --kv-tokens {n}")\n'
        'def g():\n'
        '    raise BackendError("wrong format", "export with edgeopt optimize --format onnx")\n'
        'def h():\n'
        '    raise BackendError("too long", "lower --context")\n'
        'def i():\n'
        '    raise ExportError("unsupported", "see optimum-cli export onnx --help")\n')
    for package in ("edgeopt", "exporters", "profiles"):
        (tmp_path / package).mkdir()
    assert misnamed_flags(tmp_path) == ["runtimes/bad.py:2: --kv-tokens is not an option of serve or bench serve"]


def test_the_command_table_has_the_options_hints_rely_on() -> None:
    """A renamed option would make every hint naming it wrong at once; the walk above would say so only if it
    still reads the real CLI."""
    commands = command_flags()
    assert {"--max-concurrency", "--memory", "--context", "--kv-type", "--kv-layout"} <= commands["serve"]
    assert {"--format", "--quant", "--fit"} <= commands["optimize"]
