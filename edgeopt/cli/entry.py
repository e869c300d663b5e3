"""The ``edgeopt`` console script: what a command can begin before the CLI's own imports begins here, then the CLI.

Importing the CLI (typer, every command's module) takes ~0.4 s before a command's code runs. ``edgeopt serve
MODEL.gguf`` begins its model's load first (edgeopt.server.startup.early_load: C, a second on a 262k vocabulary),
so the load runs beside those imports and the server stack's. ``python -m edgeopt.cli.app`` does the same
(edgeopt/cli/app.py, first lines).
"""

from __future__ import annotations

import sys


def main() -> None:
    from edgeopt.server.startup.early_load import start_from_command_line

    start_from_command_line(sys.argv[1:])
    from edgeopt.cli.app import main as run_cli

    run_cli()
