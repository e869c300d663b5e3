"""The manifest's ``kv`` section: what ``edgeopt serve`` sizes a causal LM's KV cache with, recorded once by
``edgeopt optimize`` (and ``edgeopt import``) so that serving never reads the model file for it.

Typed both ways: :class:`KvSection` is written as the manifest's ``kv`` field and read back as the same
dataclass (``edgeopt.store.bundle.Manifest.kv``). Bundles written before the section existed kept these numbers
as loose keys of the manifest's ``export`` section; the ``legacy_*`` functions read them, and they are the
only place those keys are read by name. Dependency-free: ``edgeopt.store.bundle`` imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class KvSection:
    kv_elements_per_token: int  # K and V elements one token caches (edgeopt.sizing.budget.kv_elements_per_token)
    context_length: int  # the model's own window
    # The KV cache type optimize chose for a format whose runtime has several (gguf: edgeopt.sizing.kv_types),
    # served unless `serve --kv-type` says otherwise; None: the format's one fixed dtype.
    kv_type: str | None = None
    kv_bytes_per_token: int = 0  # at kv_type (or the format's dtype): what `edgeopt plan` showed for the bundle

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KvSection:
        return cls(kv_elements_per_token=int(data["kv_elements_per_token"]), context_length=int(data["context_length"]),
                   kv_type=data.get("kv_type"), kv_bytes_per_token=int(data.get("kv_bytes_per_token", 0)))

    def with_kv_type(self, kv_type: str | None) -> KvSection:
        """The same facts served with another KV cache type (``edgeopt eval --kv-type``)."""
        return replace(self, kv_type=kv_type)


# The loose keys older manifests (and exporters' own details) kept in the export section.
_ELEMENTS, _BYTES, _CONTEXT, _KV_TYPE = "kv_elements_per_token", "kv_bytes_per_token", "context_length", "kv_type"


def legacy_partial_facts(export: Mapping[str, Any], element_bytes: float) -> tuple[int | None, int | None]:
    """(KV elements per token, context window) an older manifest recorded, each None when it did not: such a
    bundle's config.json fills in the rest."""
    elements, recorded_bytes, context = export.get(_ELEMENTS), export.get(_BYTES), export.get(_CONTEXT)
    if not elements and recorded_bytes:
        elements = round(recorded_bytes / element_bytes)
    return (int(elements) if elements else None), (int(context) if context else None)


def legacy_kv_type(export: Mapping[str, Any]) -> str | None:
    kv_type = export.get(_KV_TYPE)
    return str(kv_type) if kv_type else None


def exporter_kv_elements(details: Mapping[str, Any]) -> int | None:
    """KV elements per token an exporter measured on the graph it wrote (ONNX records its own), which wins
    over the config's count."""
    elements = details.get(_ELEMENTS)
    return int(elements) if elements else None
