from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt.cli_options import Concurrency, Context, ModelArg, Target
from edgeopt.commands.plan_cmd import print_plan
from edgeopt.model_spec import load_model_spec
from edgeopt.pipeline import OptimizeOptions, check_format, resolve, run_optimize


def optimize(
    model: ModelArg,
    target: Target = "host",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Bundle directory to write.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", help="gguf, onnx or torch. Default: the profile's.")] = None,
    quant: Annotated[Optional[str], typer.Option("--quant", "-q", help="e.g. Q4_K_M, Q8_0 (gguf); int8, int4 (onnx). Default: planner's pick.")] = None,
    context: Context = None,
    concurrency: Concurrency = 1,
    eval_data: Annotated[Optional[Path], typer.Option("--eval-data", help="Text file for perplexity/KL against the original.")] = None,
    no_eval: Annotated[bool, typer.Option("--no-eval", help="Skip the quality evaluation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output directory.")] = False,
) -> None:
    """Shrink, export and quantize MODEL for a device, measure the quality cost, and write a bundle."""
    check_format(fmt)
    opts = OptimizeOptions(model=model, target=target, output=output, format=fmt, quant=quant, context=context,
                           concurrency=concurrency, eval_data=eval_data, evaluate=not no_eval, force=force,
                           dry_run=dry_run)
    resolved = resolve(opts)
    print_plan(resolved.plan, load_model_spec(model).num_parameters)
    typer.echo(f"will write {resolved.format}:{resolved.quant} for runtime {resolved.runtime} to {resolved.output}")
    if dry_run:
        return
    manifest = run_optimize(opts, report=typer.echo)
    if manifest and manifest.metrics:
        typer.echo("quality: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in manifest.metrics.items()))
