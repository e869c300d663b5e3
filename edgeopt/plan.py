"""Memory planner: will this model fit the device, in which format and quantization, with how much KV?

Everything here is arithmetic on a :class:`ModelSpec` (config only) and a :class:`DeviceProfile`:

    KV bytes/token = 2 x layers x kv_heads x head_dim x bytes(kv dtype)
    KV budget      = usable memory - weights - runtime overhead - safety margin
    KV capacity    = KV budget // KV bytes/token        (tokens, shared by all sequences)
    concurrency    = KV capacity // context             (sequences that can each hold a full context)

On unified-memory devices (Jetson) CPU and GPU draw from the same pool, so weights are counted once.

Encoders (``spec.kind == "embedding"``) keep no KV cache: they are sized for ONNX only (fp32, int8),
their KV figures are 0 (meaningless, not "no room"), and they fit when weights + runtime overhead
stay within usable memory less the safety margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgeopt.errors import ConfigError, DoesNotFitError, UnsupportedArchitectureError
from edgeopt.memory_budget import KV_BYTES_PER_ELEMENT, MIB, RUNTIME_OVERHEAD_BYTES, after_margin
from edgeopt.model_spec import ModelSpec
from exporters.gguf.quant_types import FILE_TYPES, estimate_gguf_bytes
from exporters.onnx.quant_types import QUANTS as ONNX_QUANTS
from exporters.onnx.quant_types import estimate_onnx_bytes
from profiles import DeviceProfile

GGUF_CANDIDATES = ("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")
ONNX_CANDIDATES = ("fp32", "int8", "int4")
ENCODER_CANDIDATES = ("fp32", "int8")  # onnx; encoders are small, INT4 MatMulNBits buys them little
FORMAT_RUNTIME = {"gguf": "llama_cpp", "onnx": "onnxruntime", "torch": "torch"}
TORCH_DTYPES = ("fp32", "fp16", "bf16")  # a torch bundle's "quant" is the dtype of its checkpoint
FORMAT_QUANTS: dict[str, tuple[str, ...]] = {"gguf": tuple(FILE_TYPES), "onnx": ONNX_QUANTS, "torch": TORCH_DTYPES}


@dataclass(frozen=True)
class Candidate:
    format: str
    quant: str
    weight_bytes: int
    kv_bytes_per_token: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_token_capacity: int
    max_concurrency: int
    fits: bool

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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["recommended"] = self.recommended.label if self.recommended else None
        return data


def canonical_quant(fmt: str, quant: str) -> str:
    """The format's own spelling of a quant name given in any case (``q4_k_m`` -> ``Q4_K_M``, ``INT8`` ->
    ``int8``), as llama-quantize and Ollama accept it; an unknown name is refused with the valid ones."""
    if fmt not in FORMAT_QUANTS:
        raise ConfigError(f"unknown format {fmt!r}", f"valid formats: {', '.join(FORMAT_QUANTS)}")
    by_folded_name = {name.casefold(): name for name in FORMAT_QUANTS[fmt]}
    canonical = by_folded_name.get(quant.strip().casefold())
    if canonical is None:
        raise ConfigError(f"unknown {fmt} quant {quant!r}", f"valid (any case): {', '.join(FORMAT_QUANTS[fmt])}")
    return canonical


def weight_bytes(spec: ModelSpec, fmt: str, quant: str) -> int:
    quant = canonical_quant(fmt, quant)
    if fmt == "gguf":
        return estimate_gguf_bytes(spec, quant)
    if fmt == "onnx":
        return estimate_onnx_bytes(spec, quant)
    return spec.num_parameters * (4 if quant == "fp32" else 2)  # torch: the checkpoint in that dtype


def size_candidate(spec: ModelSpec, profile: DeviceProfile, fmt: str, quant: str, context: int,
                   concurrency: int, memory_bytes: int | None = None) -> Candidate:
    usable = memory_bytes if memory_bytes is not None else profile.usable_memory_bytes
    weights = weight_bytes(spec, fmt, quant)
    overhead = RUNTIME_OVERHEAD_BYTES[FORMAT_RUNTIME[fmt]]
    kv_per_token = spec.kv_bytes_per_token(KV_BYTES_PER_ELEMENT[fmt])
    budget = after_margin(usable) - weights - overhead
    if spec.is_encoder:  # no KV cache: capacity is meaningless, fitting is weights + overhead alone
        return Candidate(format=fmt, quant=quant, weight_bytes=weights, kv_bytes_per_token=0,
                         overhead_bytes=overhead, kv_budget_bytes=budget, kv_token_capacity=0,
                         max_concurrency=0, fits=budget >= 0)
    capacity = max(budget, 0) // kv_per_token
    return Candidate(
        format=fmt, quant=quant, weight_bytes=weights, kv_bytes_per_token=kv_per_token,
        overhead_bytes=overhead, kv_budget_bytes=budget, kv_token_capacity=capacity,
        max_concurrency=capacity // context, fits=capacity >= context * concurrency,
    )


def make_plan(spec: ModelSpec, profile: DeviceProfile, context: int | None = None, concurrency: int = 1,
              formats: tuple[str, ...] | None = None, memory_bytes: int | None = None) -> Plan:
    """Size every candidate of ``formats`` (default: gguf and onnx; onnx alone for encoders)."""
    formats = formats or (("onnx",) if spec.is_encoder else ("gguf", "onnx"))
    check_encoder_formats(spec, formats)
    context = context or min(spec.max_position_embeddings, 4096)
    if context < 1 or concurrency < 1:
        raise ConfigError(f"context={context} and concurrency={concurrency} must both be >= 1", "pass positive values")
    candidates = []
    for fmt in formats:
        quants = format_candidates(spec, profile, fmt)
        candidates += [size_candidate(spec, profile, fmt, q, context, concurrency, memory_bytes) for q in quants]
    usable = memory_bytes if memory_bytes is not None else profile.usable_memory_bytes
    return Plan(spec.source, profile.name, usable, context, concurrency, candidates,
                recommend(candidates, profile))


def check_encoder_formats(spec: ModelSpec, formats: tuple[str, ...]) -> None:
    """Encoders export to ONNX only: refuse any other format before anything is sized or exported."""
    other = [fmt for fmt in formats if fmt != "onnx"]
    if spec.is_encoder and other:
        raise UnsupportedArchitectureError(
            f"{spec.source} is an encoder ({spec.hf_architecture}); format {other[0]!r} serves causal LMs only",
            "export encoders with --format onnx (they are served on /v1/embeddings)")


def format_candidates(spec: ModelSpec, profile: DeviceProfile, fmt: str) -> tuple[str, ...]:
    if spec.is_encoder:
        return ENCODER_CANDIDATES
    return GGUF_CANDIDATES if fmt == "gguf" else ONNX_CANDIDATES if fmt == "onnx" else torch_candidates(profile)


def torch_candidates(profile: DeviceProfile) -> tuple[str, ...]:
    """Torch dtypes to offer: half precision on CUDA (bf16 from Ampere, sm_80, on), else fp32 first
    (CPU half-precision matmuls are slow or missing) with bf16 as the fallback when fp32 does not fit."""
    if profile.has_cuda:
        arch = profile.accelerator.partition("sm_")[2]
        return ("bf16",) if arch.isdigit() and int(arch) >= 80 else ("fp16",)
    return ("fp32", "bf16")


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
    usable = after_margin(plan.usable_memory_bytes)
    if smallest.kv_bytes_per_token == 0:  # an encoder: weights and overhead alone
        needed = smallest.weight_bytes + smallest.overhead_bytes
        raise DoesNotFitError(
            f"{plan.model} does not fit {plan.target} even at {smallest.label}: needs {needed / MIB:.0f} MiB, "
            f"{usable / MIB:.0f} MiB usable",
            "pick a larger --target or a smaller encoder")
    needed = smallest.weight_bytes + smallest.overhead_bytes + smallest.kv_bytes_per_token * plan.context * plan.concurrency
    raise DoesNotFitError(
        f"{plan.model} does not fit {plan.target} even at {smallest.label}: needs {needed / MIB:.0f} MiB "
        f"for {plan.concurrency} x {plan.context} tokens, {(needed - usable) / MIB:.0f} MiB more than the "
        f"{usable / MIB:.0f} MiB usable",
        "lower --context or --concurrency, pick a larger --target, or prune with --fit",
    )
