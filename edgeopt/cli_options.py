"""Options shared by several commands, as Annotated aliases (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Target = Annotated[str, typer.Option("--target", "-t", help="Device profile name, family alias (jetson, raspberry-pi) or .toml path; 'host' is this machine.")]
Context = Annotated[Optional[int], typer.Option("--context", "-c", help="Tokens each sequence must be able to hold (prompt + output). Default: min(model max, 4096).")]
Concurrency = Annotated[int, typer.Option("--concurrency", "-n", help="Sequences that must fit at full context at once.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]
JsonFile = Annotated[Optional[Path], typer.Option("--json", help="Write the full results to this file.")]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads for the runtime.")]
BundleArg = Annotated[Path, typer.Argument(help="Bundle directory written by edgeopt optimize.")]
ModelArg = Annotated[str, typer.Argument(help="Hugging Face hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or local checkpoint directory.")]
