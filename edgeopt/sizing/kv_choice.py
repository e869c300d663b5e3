"""The KV cache type a model is sized with, and the bytes of its cached elements: the one asked for or recorded
(edgeopt.sizing.shape.served_kv_type), else the format's default, unless a plan gives a tight type and the
default's cache cannot hold the sequences asked for at full context; then the tight one (the profile's
``tight_memory_kv_type``: q8_0 in every shipped profile, 1.9x the tokens for a KL of ~3e-5 on the demo model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeopt.sizing.budget import KvFacts, MemoryPool, size_kv
from edgeopt.sizing.kv_types import kv_element_bytes_for

if TYPE_CHECKING:  # profiles imports backends (through edgeopt.sizing.kv_types)
    from edgeopt.backends import Backend


def kv_type_in_memory(entry: Backend, quant: str, served: str | None, tight: str | None, facts: KvFacts,
                      pool: MemoryPool, context: int, sequences: int | None) -> tuple[str | None, float]:
    """(KV type, bytes per cached element): ``served``, or ``tight`` when ``served``'s cache of ``facts`` in ``pool``
    holds fewer than ``sequences`` x ``context`` tokens (the runtime's own overhead counted, no draft rows)."""
    element_bytes = kv_element_bytes_for(entry.format, quant, served)
    if tight is None or served is None or sequences is None:
        return served, element_bytes
    at_served = size_kv(facts, pool, kv_element_bytes=element_bytes, context=context, max_sequences=sequences)
    if at_served.kv_fit_tokens >= context * sequences:
        return served, element_bytes
    return tight, kv_element_bytes_for(entry.format, quant, tight)
