"""`edgeopt --help` stays cheap: the CLI imports every command module by name (cli/app.py), and each of them
keeps torch, the runtimes, the engine, the server app and the exporters inside its functions. So does what
`edgeopt serve` never uses: rich's tables and the optimize pipeline (the server's resident memory)."""

from __future__ import annotations

from tests.fixtures.import_probe import HEAVY, banned_modules_after

COMMANDS = ("profiles", "plan", "optimize", "inspect", "serve", "bench", "eval", "demo", "import", "monitor")
LOADED_ON_USE = ("llama_cpp", "onnxruntime", "onnx", "fastapi", "uvicorn", "textual", "numpy", "gguf", "rich")


def test_importing_the_cli_loads_every_command_and_nothing_heavy() -> None:
    banned = banned_modules_after(
        "import edgeopt.cli.app", banned_roots=HEAVY + LOADED_ON_USE,
        also_banned_prefix=("edgeopt.engine", "edgeopt.exporters", "edgeopt.runtimes", "edgeopt.server.app",
                            "edgeopt.optimize"),
        must_load=tuple(f"edgeopt.cli.commands.{name}_cmd" for name in COMMANDS))
    assert banned == []
