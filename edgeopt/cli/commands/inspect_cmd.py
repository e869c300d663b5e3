from __future__ import annotations

import json

import typer

from edgeopt.store.bundle import load_bundle
from edgeopt.cli.options import BundleOrGguf, JsonOut
from edgeopt.sources.gguf_model import is_gguf_only
from edgeopt.sources.model_source import open_model_source


def inspect(
    bundle: BundleOrGguf,
    as_json: JsonOut = False,
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check every file's sha256."),
) -> None:
    """Print a bundle's manifest (and verify its files), or what edgeopt reads from a GGUF file."""
    source = open_model_source(bundle, verify=False)
    manifest = source.manifest if source.is_file else load_bundle(bundle, verify=verify, rehash=True)
    if as_json:
        print(manifest.to_json())
        return
    typer.echo(f"{'gguf file' if source.is_file else 'bundle'}  {bundle}")
    typer.echo(f"source     {manifest.source_model} ({manifest.source_revision})")
    typer.echo(f"target     {manifest.target}")
    typer.echo(f"format     {manifest.format} {manifest.quant} -> runtime {manifest.runtime}")
    typer.echo(f"model      {manifest.model_file} ({manifest.architecture}, {manifest.kind})")
    if is_gguf_only(manifest):
        from edgeopt.sizing.bundle_facts import recorded_kv_section

        kv = recorded_kv_section(source.bundle_dir, manifest)
        typer.echo(f"shape      context {kv.context_length} tokens, {kv.kv_elements_per_token} KV "
                   f"elements/token, chat template {'yes' if manifest.chat_template else 'none'}")
    for p in manifest.passes:
        typer.echo(f"pass       {p.name} {p.params} {p.seconds:.1f}s {p.metrics}")
    for k, v in manifest.metrics.items():
        typer.echo(f"metric     {k} = {v}")
    if not manifest.metrics:
        why = ("made from a GGUF file, not by edgeopt optimize from its original checkpoint" if is_gguf_only(manifest)
               else "none recorded")
        typer.echo(f"quality    absent: no perplexity/KL figures ({why}); edgeopt optimize from the original "
                   "checkpoint measures them")
    if source.is_file:
        return
    total = sum(f["bytes"] for f in manifest.files.values())
    typer.echo(f"files      {len(manifest.files)} ({total / 1024**2:.1f} MiB){', verified' if verify else ''}")
