"""``edgeopt import FILE.gguf -o BUNDLE``: a bundle (manifest, sha256 of every file) around a GGUF file that
edgeopt did not make, for deployment like any other bundle (``serve``, ``inspect``, copy-and-verify)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

import typer

from edgeopt.store.bundle import MANIFEST, staged_bundle, write_manifest
from edgeopt.errors import BundleError
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.sources.gguf_model import gguf_manifest

BUNDLE_MODEL_FILE = "model.gguf"


def import_gguf(
    gguf: Annotated[Path, typer.Argument(help="A GGUF model file (llama.cpp's converter, a hub download).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Bundle directory to write.")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle at --out.")] = False,
) -> None:
    """Write a bundle around a GGUF file: the file, and a manifest read from its metadata (no quality figures)."""
    if not is_gguf_file(gguf):
        raise BundleError(f"{gguf} is not a GGUF file", "pass the path of a .gguf model file")
    manifest = gguf_manifest(gguf, model_file=BUNDLE_MODEL_FILE)  # refuses what cannot be served first
    manifest.source_model = gguf.name
    with staged_bundle(out, force=force) as stage:
        _link_or_copy(gguf, stage / BUNDLE_MODEL_FILE)
        written = write_manifest(stage, manifest)
        # The revision is the file's own hash, computed once by write_manifest; the manifest is rewritten
        # inside the staging directory, so the published bundle still appears whole in one rename.
        written.source_revision = "sha256:" + written.files[BUNDLE_MODEL_FILE]["sha256"]
        (stage / MANIFEST).write_text(written.to_json())
    typer.echo(f"bundle {out} ({manifest.architecture} {manifest.quant}); serve it with: edgeopt serve {out}")


def _link_or_copy(src: Path, dest: Path) -> None:
    """A hard link when on the same file system (a multi-GB model is not duplicated), else a copy."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)
