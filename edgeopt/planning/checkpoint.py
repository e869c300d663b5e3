"""Memory planner: will this model fit the device, in which format and quantization, with how much KV?

Everything here is arithmetic on a :class:`ModelSpec` (config only) and a :class:`DeviceProfile`:

    KV bytes/token = 2 x layers x kv_heads x head_dim x bytes(kv type)   (edgeopt.sizing.kv_types)
    KV budget      = usable memory - weights - runtime overhead - safety margin
    KV capacity    = KV budget // KV bytes/token        (tokens, shared by all sequences)
    concurrency    = KV capacity // context             (sequences that can each hold a full context)

The sizing itself is :func:`edgeopt.sizing.budget.size_kv` on :func:`edgeopt.sizing.budget.memory_pool`,
the function and the pool ``edgeopt serve`` uses: on unified-memory devices (Jetson) CPU and GPU draw
from the same pool, so weights are counted once; on a discrete GPU the pool is the GPU's memory.
Everything about a format (quants, size estimate, KV element size, runtime overhead) is its entry in
:mod:`edgeopt.backends`.

The KV type of a gguf candidate is ``--kv-type`` when given, else the sizing's rule (edgeopt.sizing.kv_choice, given the profile's tight type):
f16 when an f16 cache holds ``concurrency`` sequences of ``context`` tokens beside those weights; when it
does not (memory is tight), the profile's ``tight_memory_kv_type`` (q8_0 in every shipped profile: 1.9x
the tokens for a KL of ~3e-5 on the demo model). ONNX and torch candidates keep their runtime's one type.

Encoders (``spec.kind == "embedding"``) keep no KV cache: they are sized for ONNX only (fp32, int8),
their KV figures are 0 (meaningless, not "no room"), and they fit when weights + runtime overhead
stay within usable memory less the safety margin.
"""

from __future__ import annotations

from edgeopt import backends
from edgeopt.errors import ConfigError, UnsupportedArchitectureError
from edgeopt.planning.plan import Candidate, Plan, candidate_from_shape
from edgeopt.planning.quants import canonical_quant
from edgeopt.planning.recommend import recommend
from edgeopt.profiles import DeviceProfile
from edgeopt.sizing.budget import memory_pool, model_kv_facts
from edgeopt.sizing.kv_types import check_head_dims, head_dims_fit
from edgeopt.sizing.shape import DEFAULT_CONTEXT, ShapeRequest, decide_serving_shape
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.speculation_modes import DEFAULT_MODE, longest_draft


def weight_bytes(spec: ModelSpec, fmt: str, quant: str) -> int:
    quant = canonical_quant(fmt, quant)
    return int(backends.load_attr(backends.backend(fmt).quants.size_estimate)(spec, quant))


def make_plan(spec: ModelSpec, profile: DeviceProfile, context: int | None = None, concurrency: int = 1,
              formats: tuple[str, ...] | None = None, memory_bytes: int | None = None,
              kv_type: str | None = None) -> Plan:
    """Size every candidate of ``formats`` (default: the registry's planned_by_default formats; for encoders,
    the formats that embed). ``kv_type`` (checked with edgeopt.sizing.kv_types.parse_kv_type) applies to the formats
    with several KV cache types (gguf); None: the sizing's rule (the profile's tight type where memory is tight)."""
    formats = formats or default_formats(spec)
    check_encoder_formats(spec, formats)
    if kv_type is not None:
        check_head_dims(kv_type, spec.head_dim, spec.head_dim, spec.source)
    context = context or min(spec.max_position_embeddings, DEFAULT_CONTEXT)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    rows = [(fmt, quant) for fmt in formats for quant in format_candidates(spec, profile, fmt)]
    candidates = size_rows(spec, profile, rows, context, concurrency, memory_bytes, kv_type)
    return Plan(spec.source, profile.name, memory_pool(profile, memory_bytes).bytes, context, concurrency, candidates,
                recommend(candidates, profile), parameters=spec.num_parameters)


def size_candidate(spec: ModelSpec, profile: DeviceProfile, fmt: str, quant: str, context: int,
                   concurrency: int, memory_bytes: int | None = None, kv_type: str | None = None,
                   file_bytes: int | None = None) -> Candidate:
    """Size one format:quant (see :func:`size_rows`)."""
    return size_rows(spec, profile, [(fmt, quant)], context, concurrency, memory_bytes, kv_type, file_bytes)[0]


def size_rows(spec: ModelSpec, profile: DeviceProfile, rows: list[tuple[str, str]], context: int, concurrency: int,
              memory_bytes: int | None = None, kv_type: str | None = None,
              file_bytes: int | None = None) -> list[Candidate]:
    """Each format:quant of ``rows`` as serve would shape it, a piece at a time for every row: the weights (the
    format's size estimate, or ``file_bytes``: the size the user fixed, a GGUF mix made to a size), the memory
    pool, then each row's serving shape. ``kv_type`` applies to formats with several KV cache types (gguf); None
    there: the format's default, or the profile's tight type when the default cannot hold ``concurrency`` x
    ``context`` tokens (edgeopt.sizing.kv_choice). Other formats keep their one KV dtype (``Candidate.kv_type`` None)."""
    weights = []
    for fmt, quant in rows:
        weights.append(file_bytes if file_bytes is not None else weight_bytes(spec, fmt, quant))
    pool = memory_pool(profile, memory_bytes)
    tight = profile.tight_memory_kv_type if head_dims_fit(profile.tight_memory_kv_type, spec.head_dim,
                                                          spec.head_dim) else None
    candidates = []
    for (fmt, quant), weight in zip(rows, weights):
        entry = backends.backend(fmt)
        facts = model_kv_facts(entry, vocab_size=spec.vocab_size, intermediate_size=spec.intermediate_size,
                               weights_bytes=weight, kv_elements_per_token=spec.kv_elements_per_token,
                               context_length=spec.max_position_embeddings, hidden_size=spec.hidden_size,
                               tied_embeddings=spec.tie_word_embeddings, attention_heads=spec.num_heads)
        kv_cache = bool(entry.serving.kv_cache_types) and not spec.is_encoder
        request = ShapeRequest(context=context, max_sequences=concurrency, kv_type=kv_type if kv_cache else None,
                               draft_rows=longest_draft(DEFAULT_MODE),
                               tight_kv_type=tight if kv_cache and tight in entry.serving.kv_cache_types else None)
        shape = decide_serving_shape(entry, quant, facts, pool, request)
        candidates.append(candidate_from_shape(fmt, quant, shape, context, concurrency, spec.is_encoder))
    return candidates


def default_formats(spec: ModelSpec) -> tuple[str, ...]:
    """What ``edgeopt plan`` compares when no format is asked for (for encoders: the formats that embed)."""
    if spec.is_encoder:
        return encoder_formats()
    return tuple(fmt for fmt in backends.formats() if backends.backend(fmt).planned_by_default)


def encoder_formats() -> tuple[str, ...]:
    return tuple(fmt for fmt in backends.formats() if backends.backend(fmt).serves_encoders)


def check_encoder_formats(spec: ModelSpec, formats: tuple[str, ...]) -> None:
    """Encoders export to the formats that embed only: refuse any other before anything is sized or exported."""
    other = [fmt for fmt in formats if not backends.backend(fmt).serves_encoders]
    if spec.is_encoder and other:
        valid = " or ".join(f"--format {fmt}" for fmt in encoder_formats())
        raise UnsupportedArchitectureError(
            f"{spec.source} is an encoder ({spec.hf_architecture}); format {other[0]!r} serves causal LMs only",
            f"export encoders with {valid} (they are served on /v1/embeddings)")


def format_candidates(spec: ModelSpec, profile: DeviceProfile, fmt: str) -> tuple[str, ...]:
    entry = backends.backend(fmt)
    if spec.is_encoder:
        return entry.quants.encoder_candidates
    if entry.quants.device_candidates:
        return tuple(backends.load_attr(entry.quants.device_candidates)(profile))
    return entry.quants.candidates


