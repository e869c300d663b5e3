"""Inference runtimes behind one small protocol (see :mod:`edgeopt.runtimes.base`), imported lazily by name."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import EmbeddingRuntime, RerankRuntime, Runtime

if TYPE_CHECKING:
    from edgeopt.store.bundle import Manifest


def runtime_module(name: str) -> Any:
    """The backend module of runtime ``name`` (named by its entry in :mod:`edgeopt.backends`), imported now."""
    return backends.load_attr(backends.backend_for_runtime(name).serving.runtime_module)


def load_runtime(name: str, bundle_dir: Path, manifest: Manifest, **options: Any) -> Runtime:
    """Import the backend module and call its ``load(bundle_dir, manifest, **options)`` (causal LMs)."""
    return runtime_module(name).load(bundle_dir, manifest, **options)


def load_embedding_runtime(name: str, bundle_dir: Path, manifest: Manifest, **options: Any) -> EmbeddingRuntime:
    """The embedding model of an embedding bundle: the backend module's ``load_embedding``, for runtimes whose
    backend entry says ``embeddings``."""
    if not backends.backend_for_runtime(name).serving.embeddings:
        serving = [b.runtime for b in map(backends.backend, backends.formats()) if b.serving.embeddings]
        raise ConfigError(f"runtime {name!r} does not serve embedding models",
                          f"export the encoder for one of: {', '.join(serving)}")
    return runtime_module(name).load_embedding(bundle_dir, manifest, **options)


def load_rerank_runtime(name: str, bundle_dir: Path, manifest: Manifest, **options: Any) -> RerankRuntime:
    """The cross-encoder of a rerank bundle: the backend module's ``load_rerank``, for runtimes that serve
    encoders (their backend entry says ``embeddings``)."""
    if not backends.backend_for_runtime(name).serving.embeddings:
        serving = [b.runtime for b in map(backends.backend, backends.formats()) if b.serving.embeddings]
        raise ConfigError(f"runtime {name!r} does not serve rerank models",
                          f"export the cross-encoder for one of: {', '.join(serving)}")
    return runtime_module(name).load_rerank(bundle_dir, manifest, **options)
