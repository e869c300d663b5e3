"""What a request asks of a model (generation, embedding, rerank) against what the model is (its bundle's
``manifest.kind``): the wrong kind is refused naming the models that do it."""

from __future__ import annotations

from edgeopt.errors import RequestError
from edgeopt.server.models.catalog import ModelCatalog, ModelEntry

KIND_OF_USE = {"generation": "causal-lm", "embedding": "embedding", "rerank": "rerank"}
WHAT = {"causal-lm": "a language model", "embedding": "an embedding model", "rerank": "a reranker (cross-encoder)"}
DOES = {"generation": "generate text", "embedding": "produce embeddings", "rerank": "rerank"}


def check_use(entry: ModelEntry, use: str, catalog: ModelCatalog) -> None:
    wanted = KIND_OF_USE[use]
    if entry.kind == wanted:
        return
    able = [e.name for e in catalog.entries() if e.kind == wanted]
    hint = (f"send it to {', '.join(repr(n) for n in able)}" if able
            else f"serve {WHAT[wanted].split(' ', 1)[1]} bundle for this route")
    raise RequestError(f"model {entry.name!r} is {WHAT.get(entry.kind, entry.kind)}: it does not {DOES[use]}", hint,
                       param="model")
