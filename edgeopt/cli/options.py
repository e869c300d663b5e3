"""Options shared by several commands, as Annotated aliases (one definition, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt import backends

Target = Annotated[str, typer.Option("--target", "-t", help="Device profile name, family alias (jetson, raspberry-pi) or .toml path; 'host' is this machine.")]
Context = Annotated[Optional[int], typer.Option("--context", "-c", help="Tokens each sequence must be able to hold (prompt + output). Default: min(model max, 4096).")]
Concurrency = Annotated[int, typer.Option("--concurrency", "-n", help="Sequences that must fit at full context at once.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]
JsonFile = Annotated[Optional[Path], typer.Option("--json", help="Write the full results to this file.")]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads for the runtime.")]
BundleArg = Annotated[Path, typer.Argument(help="Bundle directory written by edgeopt optimize.")]
BundleOrGguf = Annotated[Path, typer.Argument(help="Bundle directory written by edgeopt optimize, or a GGUF model file "
                                                   "(llama.cpp's, a hub download) served from its own metadata.")]
ModelArg = Annotated[str, typer.Argument(help="Hugging Face hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct), local checkpoint directory, or (plan) a GGUF file.")]
KvType = Annotated[Optional[str], typer.Option("--kv-type", help="llama.cpp (gguf) KV cache type: f16, q8_0 (1.9x the tokens in the same memory) or q4_0 (3.6x). Default in plan/optimize: f16, or the profile's tight_memory_kv_type when an f16 cache would not hold --concurrency x --context; in serve: the bundle's.")]


def quant_examples() -> str:
    """A few quants of each format, from the registry's quant tables: ``Q4_K_M, Q8_0, MIX (gguf); int8, int4 (onnx)``."""
    return "; ".join(f"{', '.join(entry.quants.help_examples)} ({entry.format})"
                     for entry in map(backends.backend, backends.formats()) if entry.quants.help_examples)
