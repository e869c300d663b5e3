"""What a plan is of: the typed sources :func:`edgeopt.planning.plan_for` takes, and the one rule that tells
them apart on the command line (a bundle directory, a GGUF file, else a checkpoint: hub id or directory).

A source names a model; it reads nothing until it is planned. ``BesideDraft`` and ``AcrossDevices`` wrap a
model source: served with a draft model beside it (serve --draft), or split over several boards (--devices,
--workers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from edgeopt.sizing.split_shape import WorkerMemory
from edgeopt.sources.gguf_metadata import is_gguf_file
from edgeopt.store.bundle import MANIFEST, Manifest


@dataclass(frozen=True)
class CheckpointSource:
    """A Hugging Face hub id or checkpoint directory: planned from its config alone."""

    model: str


@dataclass(frozen=True)
class BundleSource:
    """A bundle directory ``edgeopt optimize`` wrote (or a GGUF file opened as one by
    edgeopt.sources.model_source): planned as serve sizes it. ``manifest``: already read by the caller."""

    path: Path
    manifest: Manifest | None = None


@dataclass(frozen=True)
class GgufFileSource:
    """A GGUF file as it is: its own quant, weights and KV shape."""

    path: Path


ModelSource = Union[CheckpointSource, BundleSource, GgufFileSource]


@dataclass(frozen=True)
class BesideDraft:
    """``target`` served with the ``draft`` model (a GGUF bundle or file) beside it."""

    target: ModelSource
    draft: ModelSource


@dataclass(frozen=True)
class AcrossDevices:
    """``model`` split over the head (the target profile, or --memory) and workers: ``devices`` - 1 more boards
    of the target profile, or the running ``workers`` with the memory each offers (exactly one of the two)."""

    model: ModelSource
    devices: int | None = None
    workers: tuple[WorkerMemory, ...] | None = None


Source = Union[ModelSource, BesideDraft, AcrossDevices]


def path_of(source: ModelSource) -> Path:
    return Path(source.model) if isinstance(source, CheckpointSource) else source.path


def is_bundle_dir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def source_of(model: str | Path) -> ModelSource:
    """The source ``model`` names on the command line: a bundle directory, a GGUF file, else a checkpoint."""
    if is_bundle_dir(Path(model)):
        return BundleSource(Path(model))
    if is_gguf_file(Path(model)):
        return GgufFileSource(Path(model))
    return CheckpointSource(str(model))
