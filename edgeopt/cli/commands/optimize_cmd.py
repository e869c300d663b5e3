from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgeopt import backends
from edgeopt.byte_sizes import read_size
from edgeopt.cli.options import Concurrency, Context, KvType, Target, quant_examples
from edgeopt.errors import ConfigError
from edgeopt.planning import Compression, check_draft_flags


def show_llama_log() -> None:
    """Print what edgeopt.exporters.gguf.llama_log captures (it logs every llama.cpp message at DEBUG)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("llama.cpp: %(message)s"))
    logger = logging.getLogger("edgeopt.llama_cpp")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)


# Optional only for --draft-for TARGET, which names the model itself; without either, optimize says so.
ModelOrNone = Annotated[Optional[str], typer.Argument(metavar="MODEL", help="Hugging Face hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or local checkpoint directory; left out with --draft-for.")]


def optimize(
    model: ModelOrNone = None,
    target: Target = "host",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Bundle directory to write.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", help=f"{', '.join(backends.formats())}. Default: the profile's.")] = None,
    quant: Annotated[Optional[str], typer.Option("--quant", "-q", help=f"e.g. {quant_examples()}. Default: planner's pick.")] = None,
    kv_type: KvType = None,
    context: Context = None,
    concurrency: Concurrency = 1,
    eval_data: Annotated[Optional[Path], typer.Option("--eval-data", help="Text file for perplexity/KL against the original (encoders: one text per line, for embedding cosines).")] = None,
    no_eval: Annotated[bool, typer.Option("--no-eval", help="Skip the quality evaluation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output directory.")] = False,
    accept_quality_loss: Annotated[bool, typer.Option("--accept-quality-loss", help="Write the bundle even when its evaluation is under the quality floor (top-1 agreement < 80%, or KL > 5x what the bit width costs); the manifest records it.")] = False,
    prune: Annotated[Optional[float], typer.Option("--prune", help="Remove this fraction of non-embedding parameters (structured), e.g. 0.3.")] = None,
    prune_heads: Annotated[Optional[float], typer.Option("--prune-heads", help="Fraction of attention heads to remove (GQA groups kept uniform).")] = None,
    prune_mlp: Annotated[Optional[float], typer.Option("--prune-mlp", help="Fraction of MLP channels to remove.")] = None,
    prune_layers: Annotated[Optional[int], typer.Option("--prune-layers", help="Number of whole layers to remove.")] = None,
    distil: Annotated[Optional[bool], typer.Option("--distil/--no-distil", help="Distil the pruned model from the original. Default: on when --distil-data is given.")] = None,
    distil_data: Annotated[Optional[Path], typer.Option("--distil-data", help="Plain-text file for calibration and distillation.")] = None,
    distil_steps: Annotated[int, typer.Option("--distil-steps", help="Optimizer steps of distillation.")] = 200,
    fit: Annotated[bool, typer.Option("--fit", help="If the model does not fit the target, prune just enough that it does.")] = False,
    calibration_data: Annotated[Optional[Path], typer.Option("--calibration-data", help="Text like what the model will see: the importance matrix of GGUF k-quants/IQ types, the weighting of onnx int4 blocks, or static INT8 calibration (onnx int8-static).")] = None,
    calibration_method: Annotated[Optional[str], typer.Option("--calibration-method", help="minmax, entropy or percentile (onnx int8-static).")] = None,
    int4_block_size: Annotated[Optional[int], typer.Option("--int4-block-size", help="Weights per INT4 scale block: 16, 32, 64, 128 or 256 (onnx int4).")] = None,
    int8_method: Annotated[Optional[str], typer.Option("--int8-method", help="onnx --quant int8: weight-only (MatMulNBits, blocks of 32; the default for LLMs) or dynamic (per-tensor activation scales; the default for encoders).")] = None,
    int4_mix: Annotated[Optional[str], typer.Option("--int4-mix", help="onnx --quant int4: sensitive-int8 (v/o/down projections and an untied lm_head in INT8, as llama.cpp's Q4_K_M gives them more bits; default) or uniform (INT4 everywhere).")] = None,
    int4_algorithm: Annotated[Optional[str], typer.Option("--int4-algorithm", help="onnx --quant int4: weighted (each block's scale and zero point searched for, weighted by the calibration text's activations; int8 compute; default), gptq (only with --size, and its default there with --calibration-data: each column's rounding error compensated on the later columns, given the calibration inputs' correlations), rtn (round to nearest, symmetric) or hqq (optimised scales and float zero points, fp32 compute; minutes per 100M weights).")] = None,
    size: Annotated[Optional[str], typer.Option("--size", help="The file size to fit (e.g. 90MiB). GGUF: each tensor's type is chosen by its measured effect on the calibration text, or on text the model writes itself (--quant MIX; minutes; without --size, MIX is made at Q4_K_M's size). ONNX: which MatMuls keep 8 bits beside 4-bit ones (--quant int4).")] = None,
    self_calibration: Annotated[bool, typer.Option("--self-calibration/--no-self-calibration", help="Without --calibration-data: measure activations on text the model writes itself (default; about a minute for a 135M model) for the importance matrix of GGUF k-quants, IQ types and MIX and the weighting of onnx int4 blocks, or quantize without them (as llama.cpp does without --imatrix).")] = True,
    keep_fp: Annotated[Optional[list[str]], typer.Option("--keep-fp", help="Nodes kept in float (onnx): lm_head, embeddings or a node-name fragment; repeatable.")] = None,
    ignore_fit: Annotated[bool, typer.Option("--ignore-fit", help="Write the bundle even when the plan marks the chosen --quant/--size as not fitting --target at --concurrency x --context.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars (or, off a terminal, the line each long step prints when it ends); the plan, step reports and figures are still printed.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print llama.cpp's full quantization log (by default it is summarized in two lines and the manifest).")] = False,
    draft_for: Annotated[Optional[str], typer.Option("--draft-for", metavar="TARGET", help="Instead of MODEL: make a draft model for TARGET (hub id or checkpoint directory) for serve --draft: TARGET pruned (default: a quarter of its layers kept; or --prune*) and distilled from it on --distil-data, written as GGUF; reports how often TARGET accepts its tokens on held-out text.")] = None,
) -> None:
    """Shrink, export and quantize MODEL for a device, measure the quality cost, and write a bundle.

    With --draft-for TARGET: make a small draft model of TARGET's vocabulary for `edgeopt serve TARGET_BUNDLE --draft`."""
    # Here, not at the top: every command's module is imported by `edgeopt serve` too, which needs neither the
    # workshop nor rich's tables (resident memory and start-up time).
    from edgeopt.cli.plan_table import print_optimize_plan
    from edgeopt.optimize.export_options import export_options
    from edgeopt.optimize.options import OptimizeOptions, check_format, resolve
    from edgeopt.optimize.pipeline import run_optimize

    if verbose:
        show_llama_log()
    if quiet:
        from edgeopt.progress import quiet as no_progress

        no_progress()
    written_size = read_size(size, "--size") if size is not None else None
    exports = export_options(calibration_data=calibration_data, calibration_method=calibration_method,
                             int4_block_size=int4_block_size, int8_method=int8_method, int4_mix=int4_mix,
                             int4_algorithm=int4_algorithm, keep_fp=keep_fp,
                             size_bytes=written_size.bytes if written_size else None, self_calibration=self_calibration)
    check_format(fmt)
    if draft_for is not None:
        check_draft_flags(model, draft_for, fmt, fit, accept_quality_loss, distil, distil_data, eval_data)
        model = draft_for
    elif model is None:
        raise ConfigError("edgeopt optimize needs MODEL", "pass a hub id or checkpoint directory: edgeopt optimize "
                          "MODEL, or make a draft model for one: edgeopt optimize --draft-for TARGET --distil-data FILE")
    compression = Compression(prune=prune, prune_heads=prune_heads, prune_mlp=prune_mlp, prune_layers=prune_layers,
                              distil=distil, distil_data=distil_data, distil_steps=distil_steps)
    opts = OptimizeOptions(model=model, target=target, output=output, format=fmt, quant=quant, kv_type=kv_type, context=context,
                           concurrency=concurrency, eval_data=eval_data, evaluate=not no_eval, force=force,
                           dry_run=dry_run, fit=fit, accept_quality_loss=accept_quality_loss, ignore_fit=ignore_fit,
                           size=written_size, compression=compression, draft=draft_for is not None,
                           export_options=exports)
    resolved = resolve(opts)
    print_optimize_plan(resolved, ignore_fit, typer.echo)
    if dry_run:
        return
    manifest = run_optimize(opts, report=typer.echo, resolved=resolved)
    if manifest and manifest.metrics:
        figures = {k: v for k, v in manifest.metrics.items() if k not in ("quality_floor", "draft")}
        typer.echo("quality: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in figures.items()))
        floor = manifest.metrics.get("quality_floor", {})
        if floor.get("accepted_below_floor"):
            typer.echo("quality floor: UNDER the floor (" + "; ".join(floor["failures"]) +
                       "); written because --accept-quality-loss was given, and recorded in the manifest")
    if manifest and "draft" in manifest.metrics:
        typer.echo(describe_acceptance(manifest.metrics["draft"]))
    elif manifest and draft_for is not None:
        typer.echo("draft: acceptance not measured (--no-eval)")


def describe_acceptance(draft: dict[str, Any]) -> str:
    """The command's last line for a draft: what serve --draft would gain a step, and on what text."""
    rates = "/".join(f"{v['acceptance']:.0%}" for v in draft["by_draft_tokens"].values())
    return (f"draft: {draft['target']} would accept {draft['acceptance']:.0%} of its tokens at {draft['draft_tokens']} "
            f"a step, {draft['tokens_per_step']:.2f} tokens per target step (at {'/'.join(draft['by_draft_tokens'])} "
            f"a step: {rates}); it predicts {draft['token_agreement']:.0%} of the target's {draft['target_tokens']} "
            f"greedy tokens after {draft['contexts']} contexts of {draft['held_out_text']}; "
            f"{draft['parameters'] / 1e6:.1f}M parameters, {draft['parameters'] / draft['target_parameters']:.0%} "
            "of the target's")
