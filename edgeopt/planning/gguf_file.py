"""``edgeopt plan FILE.gguf``: the planner's sizing for a GGUF file as it is (its quantization is fixed, its
weights are the file's bytes), with the KV shape and context from its metadata (edgeopt.sources.gguf_model).

One candidate, sized by the same function as every other plan (edgeopt.sizing.shape.decide_serving_shape, with
the profile's tight KV type where memory is tight) and as ``edgeopt serve FILE.gguf``, so a plan that fits also serves.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt import backends
from edgeopt.speculation_modes import DEFAULT_MODE, longest_draft
from edgeopt.errors import ConfigError
from edgeopt.sources.gguf_model import gguf_kv_elements_per_token, gguf_metadata, gguf_model_spec
from edgeopt.planning.plan import Plan, candidate_from_shape
from edgeopt.planning.recommend import recommend
from edgeopt.sizing.budget import memory_pool, model_kv_facts
from edgeopt.sizing.kv_types import check_head_dims, head_dims_fit
from edgeopt.sizing.shape import DEFAULT_CONTEXT, ShapeRequest, decide_serving_shape
from edgeopt.profiles import DeviceProfile


def plan_gguf_file(path: Path, profile: DeviceProfile, context: int | None = None, concurrency: int = 1,
                   memory_bytes: int | None = None, kv_type: str | None = None) -> Plan:
    meta = gguf_metadata(path)
    spec = gguf_model_spec(meta)
    entry = backends.backend("gguf")
    facts = model_kv_facts(entry, vocab_size=spec.vocab_size, intermediate_size=spec.intermediate_size,
                           weights_bytes=Path(path).stat().st_size,
                           kv_elements_per_token=gguf_kv_elements_per_token(meta),
                           context_length=spec.max_position_embeddings, attention_heads=spec.num_heads)
    context = context or min(spec.max_position_embeddings, DEFAULT_CONTEXT)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    pool = memory_pool(profile, memory_bytes)
    if kv_type is not None:
        check_head_dims(kv_type, spec.head_dim, spec.head_dim, str(path))
    tight = profile.tight_memory_kv_type
    fits_tight = tight in entry.serving.kv_cache_types and head_dims_fit(tight, spec.head_dim, spec.head_dim)
    shape = decide_serving_shape(entry, meta.file_type, facts, pool,
                                 ShapeRequest(context=context, max_sequences=concurrency, kv_type=kv_type,
                                              draft_rows=longest_draft(DEFAULT_MODE),
                                              tight_kv_type=tight if fits_tight else None))
    candidate = candidate_from_shape("gguf", meta.file_type, shape, context, concurrency, encoder=False)
    # A file's quant is what it is: it is recommended when it fits, whatever the profile would pick.
    return Plan(str(path), profile.name, pool.bytes, context, concurrency, [candidate],
                candidate if candidate.fits else recommend([], profile), parameters=meta.parameter_count)
