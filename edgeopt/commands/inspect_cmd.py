from __future__ import annotations

import json

import typer

from edgeopt.bundle import load_bundle
from edgeopt.cli_options import BundleArg, JsonOut


def inspect(
    bundle: BundleArg,
    as_json: JsonOut = False,
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check every file's sha256."),
) -> None:
    """Print a bundle's manifest (and verify its files)."""
    manifest = load_bundle(bundle, verify=verify, rehash=True)
    if as_json:
        print(manifest.to_json())
        return
    typer.echo(f"bundle     {bundle}")
    typer.echo(f"source     {manifest.source_model} ({manifest.source_revision})")
    typer.echo(f"target     {manifest.target}")
    typer.echo(f"format     {manifest.format} {manifest.quant} -> runtime {manifest.runtime}")
    typer.echo(f"model      {manifest.model_file} ({manifest.architecture}, {manifest.kind})")
    for p in manifest.passes:
        typer.echo(f"pass       {p.name} {p.params} {p.seconds:.1f}s {p.metrics}")
    for k, v in manifest.metrics.items():
        typer.echo(f"metric     {k} = {v}")
    total = sum(f["bytes"] for f in manifest.files.values())
    typer.echo(f"files      {len(manifest.files)} ({total / 1024**2:.1f} MiB){', verified' if verify else ''}")
