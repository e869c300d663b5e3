"""``edgeopt demo-model DIR``: write the offline demo checkpoint (trained once, then copied from cache)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated

import typer

from edgeopt.errors import OutputExistsError


def demo_model(
    directory: Annotated[Path, typer.Argument(help="Where to write the checkpoint (a HF model directory).")],
    seed: Annotated[int, typer.Option("--seed", help="Training seed; each seed is built and cached once.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace DIR if it exists.")] = False,
) -> None:
    """Write a small Llama trained offline on the Python stdlib docs (built once, ~5 min on one core)."""
    from edgeopt.demo.store import DONE_MARKER
    from edgeopt.demo.train import ensure_demo_model  # lazy: keeps torch out of `edgeopt --help`

    if directory.exists() and not force:
        raise OutputExistsError(f"output directory {directory} already exists",
                                "pass --force to replace it, or choose another DIR")
    cached = ensure_demo_model(seed=seed, report=typer.echo)
    if directory.exists():
        shutil.rmtree(directory) if directory.is_dir() else directory.unlink()
    shutil.copytree(cached, directory)
    metrics = json.loads((cached / DONE_MARKER).read_text())["metrics"]
    typer.echo(f"demo model written to {directory} (cached at {cached})")
    typer.echo(f"eval perplexity {metrics['eval_perplexity']:.2f} vs unigram baseline "
               f"{metrics['unigram_perplexity']:.2f}; held-out text: {directory / 'eval.txt'}")
