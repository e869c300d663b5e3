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

The KV type of a gguf candidate is ``--kv-type`` when given, else the rule of :func:`choose_kv_type`:
f16 when an f16 cache holds ``concurrency`` sequences of ``context`` tokens beside those weights; when it
does not (memory is tight), the profile's ``tight_memory_kv_type`` (q8_0 in every shipped profile: 1.9x
the tokens for a KL of ~3e-5 on the demo model). ONNX and torch candidates keep their runtime's one type.

Encoders (``spec.kind == "embedding"``) keep no KV cache: they are sized for ONNX only (fp32, int8),
their KV figures are 0 (meaningless, not "no room"), and they fit when weights + runtime overhead
stay within usable memory less the safety margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgeopt import backends
from edgeopt.speculation_modes import DEFAULT_MODE, longest_draft
from edgeopt.errors import ConfigError, DoesNotFitError, UnsupportedArchitectureError
from edgeopt.sizing.budget import MIB, KvFacts, MemoryPool, after_margin, memory_pool, model_kv_facts, size_kv
from edgeopt.sizing.kv_types import check_head_dims, head_dims_fit, kv_element_bytes
from edgeopt.sizing.resident import ResidentMemory, resident_memory
from edgeopt.sizing.shape import DEFAULT_CONTEXT, ServingShape, ShapeRequest, decide_serving_shape
from edgeopt.sources.model_spec import ModelSpec
from edgeopt.profiles import DeviceProfile


@dataclass(frozen=True)
class Candidate:
    format: str
    quant: str
    weight_bytes: int
    kv_type: str | None  # gguf: f16, q8_0 or q4_0 (edgeopt.sizing.kv_types); None: the format's one fixed KV dtype
    # gguf: the KV layout `serve` picks by default (--kv-layout auto, prefix cache on; edgeopt.sizing.shape);
    # None: the format has one
    kv_layout: str | None
    kv_bytes_per_token: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_token_capacity: int
    max_concurrency: int
    fits: bool
    # What `serve` holds resident in this shape: weights, KV cells by purpose, runtime buffers, the process
    # (edgeopt.sizing.resident); None for rows not sized as a serving shape.
    resident: ResidentMemory | None = None

    @property
    def label(self) -> str:
        return f"{self.format}:{self.quant}"


@dataclass(frozen=True)
class Plan:
    model: str
    target: str
    usable_memory_bytes: int
    context: int
    concurrency: int
    candidates: list[Candidate]
    recommended: Candidate | None
    parameters: int = 0  # of the model planned, for the plan's heading (not in its JSON)

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["parameters"]
        data["recommended"] = self.recommended.label if self.recommended else None
        for row, candidate in zip(data["candidates"], self.candidates):  # with the totals asdict leaves out
            row["resident"] = candidate.resident.to_dict() if candidate.resident else None
        return data


def format_quants(fmt: str) -> tuple[str, ...]:
    """Every quant name ``fmt`` knows, in its canonical spelling (the backend's own table)."""
    return backends.backend(fmt).quants.names


def canonical_quant(fmt: str, quant: str) -> str:
    """The format's own spelling of a quant name given in any case (``q4_k_m`` -> ``Q4_K_M``, ``INT8`` ->
    ``int8``), as llama-quantize and Ollama accept it; an unknown name is refused with the valid ones."""
    known = format_quants(fmt)
    by_folded_name = {name.casefold(): name for name in known}
    canonical = by_folded_name.get(quant.strip().casefold())
    if canonical is None:
        raise ConfigError(f"unknown {fmt} quant {quant!r}", f"valid (any case): {', '.join(known)}")
    return canonical


def weight_bytes(spec: ModelSpec, fmt: str, quant: str) -> int:
    quant = canonical_quant(fmt, quant)
    return int(backends.load_attr(backends.backend(fmt).size_estimate)(spec, quant))


def size_candidate(spec: ModelSpec, profile: DeviceProfile, fmt: str, quant: str, context: int,
                   concurrency: int, memory_bytes: int | None = None, kv_type: str | None = None,
                   file_bytes: int | None = None) -> Candidate:
    """Size one format:quant. ``kv_type`` applies to formats with several KV cache types (gguf); None there:
    the rule of :func:`choose_kv_type`. Other formats keep their one KV dtype (``Candidate.kv_type`` None).
    ``file_bytes``: the size the user fixed (a GGUF mix made to a size) instead of the format's estimate."""
    entry = backends.backend(fmt)
    weights = file_bytes if file_bytes is not None else weight_bytes(spec, fmt, quant)
    facts = model_kv_facts(entry, vocab_size=spec.vocab_size, intermediate_size=spec.intermediate_size,
                           weights_bytes=weights, kv_elements_per_token=spec.kv_elements_per_token,
                           context_length=spec.max_position_embeddings, hidden_size=spec.hidden_size,
                           tied_embeddings=spec.tie_word_embeddings, attention_heads=spec.num_heads)
    pool = memory_pool(profile, memory_bytes)
    if entry.kv_cache_types and not spec.is_encoder:
        kv_type = kv_type or choose_kv_type(spec, profile, facts, pool, entry.kv_cache_types, context, concurrency)
    else:
        kv_type = None
    shape = decide_serving_shape(entry, quant, facts, pool,
                                 ShapeRequest(context=context, max_sequences=concurrency, kv_type=kv_type,
                                              draft_rows=longest_draft(DEFAULT_MODE)))
    return candidate_from_shape(fmt, quant, shape, context, concurrency, spec.is_encoder)


def candidate_from_shape(fmt: str, quant: str, shape: ServingShape, context: int, concurrency: int,
                         encoder: bool) -> Candidate:
    """A plan's row for the shape ``edgeopt serve`` would decide. Encoders keep no KV cache: their capacity is
    meaningless, and fitting is weights + overhead alone."""
    sizing = shape.sizing
    fits = sizing.kv_budget_bytes >= 0 if encoder else sizing.kv_fit_tokens >= context * concurrency
    return Candidate(
        format=fmt, quant=quant, weight_bytes=sizing.weights_bytes, kv_type=shape.kv_type,
        kv_layout=None if encoder else shape.kv_layout, kv_bytes_per_token=sizing.kv_bytes_per_token,
        overhead_bytes=sizing.overhead_bytes, kv_budget_bytes=sizing.kv_budget_bytes,
        kv_token_capacity=sizing.kv_fit_tokens, max_concurrency=sizing.kv_fit_tokens // context, fits=fits,
        resident=resident_memory(backends.backend(fmt), shape),
    )


def choose_kv_type(spec: ModelSpec, profile: DeviceProfile, facts: KvFacts, pool: MemoryPool,
                   kv_cache_types: tuple[str, ...], context: int, concurrency: int) -> str:
    """The default KV type (the first of ``kv_cache_types``: f16 for gguf) unless its cache cannot hold
    ``concurrency`` x ``context`` tokens; then the profile's ``tight_memory_kv_type`` if the head dims allow."""
    default, tight = kv_cache_types[0], profile.tight_memory_kv_type
    at_default = size_kv(facts, pool, kv_element_bytes=kv_element_bytes(default), context=context,
                         max_sequences=concurrency)
    if at_default.kv_fit_tokens >= context * concurrency or tight not in kv_cache_types:
        return default
    return tight if head_dims_fit(tight, spec.head_dim, spec.head_dim) else default


def make_plan(spec: ModelSpec, profile: DeviceProfile, context: int | None = None, concurrency: int = 1,
              formats: tuple[str, ...] | None = None, memory_bytes: int | None = None,
              kv_type: str | None = None) -> Plan:
    """Size every candidate of ``formats`` (default: the registry's planned_by_default formats; for encoders,
    the formats that embed). ``kv_type`` (checked with edgeopt.sizing.kv_types.parse_kv_type) applies to the formats
    with several KV cache types (gguf); None: the rule of :func:`choose_kv_type`."""
    formats = formats or default_formats(spec)
    check_encoder_formats(spec, formats)
    if kv_type is not None:
        check_head_dims(kv_type, spec.head_dim, spec.head_dim, spec.source)
    context = context or min(spec.max_position_embeddings, DEFAULT_CONTEXT)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    candidates = []
    for fmt in formats:
        quants = format_candidates(spec, profile, fmt)
        fmt_kv_type = kv_type if backends.backend(fmt).kv_cache_types else None
        candidates += [size_candidate(spec, profile, fmt, q, context, concurrency, memory_bytes, fmt_kv_type)
                       for q in quants]
    usable = memory_pool(profile, memory_bytes).bytes
    return Plan(spec.source, profile.name, usable, context, concurrency, candidates,
                recommend(candidates, profile), parameters=spec.num_parameters)


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
        return entry.encoder_quant_candidates
    if entry.profile_candidates:
        return tuple(backends.load_attr(entry.profile_candidates)(profile))
    return entry.quant_candidates


def recommend(candidates: list[Candidate], profile: DeviceProfile) -> Candidate | None:
    """The profile's default quant if it fits; otherwise the largest (best quality) that fits.

    Defaults are chosen per device for speed: on bandwidth-bound boards fewer bits decode faster,
    so we do not climb to F16 just because memory would allow it.
    """
    preferred = [c for c in candidates if c.format == profile.preferred_format and c.fits]
    default = next((c for c in preferred if c.quant == profile.default_quant), None)
    if default is not None:
        return default
    default_size = next((c.weight_bytes for c in candidates if c.quant == profile.default_quant), None)
    smaller = [c for c in preferred if default_size is None or c.weight_bytes <= default_size]
    pool = smaller or preferred or [c for c in candidates if c.fits]
    return max(pool, key=lambda c: c.weight_bytes) if pool else None


def require_fit(plan: Plan) -> Candidate:
    """The recommended candidate, or a DoesNotFitError saying by how much the smallest misses."""
    if plan.recommended is not None:
        return plan.recommended
    smallest = min(plan.candidates, key=lambda c: c.weight_bytes)
    if smallest.kv_bytes_per_token == 0:  # an encoder: weights and overhead alone
        raise DoesNotFitError(
            f"{plan.model} does not fit {plan.target} even at {smallest.label}: {_shortfall(plan, smallest)}",
            "pick a larger --target or a smaller encoder")
    raise DoesNotFitError(
        f"{plan.model} does not fit {plan.target} even at {smallest.label}: {_shortfall(plan, smallest)}",
        "lower --context or --concurrency, " + _kv_hint(smallest) + "pick a larger --target, or prune with --fit",
    )


def refuse_unfit(plan: Plan, chosen: Candidate) -> None:
    """``edgeopt optimize`` writes no candidate its own plan marks as not fitting, unless told to
    (``--ignore-fit``): a user who asked for a quant or a size learns by how much it misses first."""
    if chosen.fits:
        return
    raise DoesNotFitError(
        f"{plan.model} as {chosen.label} does not fit {plan.target} (the plan marks it 'fits: no'): "
        f"{_shortfall(plan, chosen)}",
        "pick a smaller --quant or --size, lower --context or --concurrency, " + _kv_hint(chosen) +
        "or pass --ignore-fit to write it anyway")


def _shortfall(plan: Plan, candidate: Candidate) -> str:
    """What ``candidate`` needs against what the target has, in words."""
    usable = after_margin(plan.usable_memory_bytes)
    if candidate.kv_bytes_per_token == 0:  # an encoder: weights and overhead alone
        needed = candidate.weight_bytes + candidate.overhead_bytes
        return f"needs {needed / MIB:.0f} MiB, {usable / MIB:.0f} MiB usable"
    needed = (candidate.weight_bytes + candidate.overhead_bytes
              + candidate.kv_bytes_per_token * plan.context * plan.concurrency)
    return (f"needs {needed / MIB:.0f} MiB for {plan.concurrency} x {plan.context} tokens, "
            f"{(needed - usable) / MIB:.0f} MiB more than the {usable / MIB:.0f} MiB usable")


def _kv_hint(candidate: Candidate) -> str:
    """Suggest the smallest KV type when the candidate's runtime has it and does not use it yet."""
    smallest = "q4_0"
    usable = smallest in backends.backend(candidate.format).kv_cache_types and candidate.kv_type != smallest
    return f"store the KV cache in 4 bits (--kv-type {smallest}), " if usable else ""
