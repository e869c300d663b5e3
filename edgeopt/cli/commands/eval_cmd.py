"""``edgeopt eval BUNDLE --data FILE``: measure a bundle's quality without re-running optimize."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.options import BundleArg, JsonOut, KvType

DataOpt = Annotated[Optional[Path], typer.Option("--data", "-d", help="UTF-8 text file to score (embedding bundles: one text per line). Default: text the original model generates; built-in sentence pairs for embedding bundles.")]
OriginalOpt = Annotated[Optional[str], typer.Option("--original", help="Original checkpoint (dir or hub id) for KL and top-1. Default: the manifest's source model.")]
NoOriginalOpt = Annotated[bool, typer.Option("--no-original", help="Only perplexity on --data; do not load the original model.")]
MaxTokensOpt = Annotated[int, typer.Option("--max-tokens", help="Score at most this many tokens of the text.")]


def eval_bundle(bundle: BundleArg, data: DataOpt = None, original: OriginalOpt = None,
                no_original: NoOriginalOpt = False, max_tokens: MaxTokensOpt = 1024, kv_type: KvType = None,
                as_json: JsonOut = False) -> None:
    """Perplexity, KL divergence and top-1 agreement of a bundle against its original model
    (embedding bundles: cosine to the original's embeddings and nearest-neighbour agreement); with a
    quantized KV cache (the bundle's, or --kv-type's), its KL and top-1 against an f16 cache too."""
    from edgeopt.evaluation.causal_lm import evaluate_bundle
    from edgeopt.sizing.bundle_facts import recorded_kv_section
    from edgeopt.sizing.kv_types import parse_kv_type
    from edgeopt.sources.checkpoint import resolve_model_dir

    if as_json:  # the document alone: no progress lines beside it, whoever merges the streams
        from edgeopt.progress import quiet

        quiet()
    manifest = load_bundle(bundle, verify=False)
    if kv_type:  # measure the cache `edgeopt serve --kv-type` would use, not the one the bundle records
        chosen = parse_kv_type(kv_type, manifest.format)
        manifest.kv = recorded_kv_section(bundle, manifest).with_kv_type(chosen)
    original_dir = None
    if not no_original:
        original_dir, _ = resolve_model_dir(original or manifest.source_model)
    from edgeopt.optimize.workbench import run_workbench

    with run_workbench() as workbench:  # where a GGUF bundle's reference (the original's F16 file) is converted
        metrics = evaluate_bundle(bundle, manifest, original_dir, data, workbench, max_tokens=max_tokens)
    if as_json:
        print(json.dumps(metrics, indent=2))
        return
    for key, value in metrics.items():
        typer.echo(f"{key:22s} {value}")
