"""``edgeopt plan FILE.gguf``: the planner's sizing for a GGUF file as it is (its quantization is fixed, its
weights are the file's bytes), with the KV shape and context from its metadata (edgeopt.gguf_model).

One candidate, sized by the same functions as every other plan (edgeopt.plan.choose_kv_type,
edgeopt.memory_budget.size_kv) and as ``edgeopt serve FILE.gguf``, so a plan that fits also serves.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt import backends
from edgeopt.errors import ConfigError
from edgeopt.gguf_model import gguf_kv_elements_per_token, gguf_metadata, gguf_model_spec
from edgeopt.kv_layout import auto_kv_layout
from edgeopt.kv_types import check_head_dims, kv_element_bytes
from edgeopt.memory_budget import memory_pool, model_kv_facts, size_kv
from edgeopt.plan import Candidate, Plan, choose_kv_type, recommend
from profiles import DeviceProfile


def plan_gguf_file(path: Path, profile: DeviceProfile, context: int | None = None, concurrency: int = 1,
                   memory_bytes: int | None = None, kv_type: str | None = None) -> Plan:
    meta = gguf_metadata(path)
    spec = gguf_model_spec(meta)
    entry = backends.backend("gguf")
    facts = model_kv_facts(entry, spec, Path(path).stat().st_size, gguf_kv_elements_per_token(meta),
                           spec.max_position_embeddings)
    context = context or min(spec.max_position_embeddings, 4096)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    pool = memory_pool(profile, memory_bytes)
    if kv_type is not None:
        check_head_dims(kv_type, spec.head_dim, spec.head_dim, str(path))
    kv_type = kv_type or choose_kv_type(spec, profile, facts, pool, entry.kv_cache_types, context, concurrency)
    sizing = size_kv(facts, pool, kv_element_bytes=kv_element_bytes(kv_type), context=context,
                     max_sequences=concurrency)
    candidate = Candidate(
        format="gguf", quant=meta.file_type, weight_bytes=facts.weights_bytes, kv_type=kv_type,
        kv_layout=auto_kv_layout(sizing.kv_fit_tokens, sizing.max_sequences, sizing.context_length,
                                 prefix_cache=True),
        kv_bytes_per_token=sizing.kv_bytes_per_token, overhead_bytes=sizing.overhead_bytes,
        kv_budget_bytes=sizing.kv_budget_bytes, kv_token_capacity=sizing.kv_fit_tokens,
        max_concurrency=sizing.kv_fit_tokens // context, fits=sizing.kv_fit_tokens >= context * concurrency)
    # A file's quant is what it is: it is recommended when it fits, whatever the profile would pick.
    return Plan(str(path), profile.name, pool.bytes, context, concurrency, [candidate],
                candidate if candidate.fits else recommend([], profile))
