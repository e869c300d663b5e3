"""The quality floor: optimize refuses to hand over a model whose measured loss says it is broken.

Two limits, checked on the evaluation of the finished bundle against the original checkpoint:

* **top-1 agreement below 80%**: the bundle picks a different next token than the original at more
  than one position in five. No quantization that works gets there (SmolLM2-135M-Instruct: GGUF Q4_K_M
  87%, ONNX weight-only INT8 96%); the dynamic INT8 that once shipped (62%) did.
* a quantized KV cache (gguf ``--kv-type q8_0/q4_0``) is a step of its own: its top-1 agreement
  against an f16 cache is held to the same 80%.
* **KL divergence above 5x what the same bit width costs**: the anchor is llama.cpp's own type of that
  width on SmolLM2-135M-Instruct, measured by edgeopt's evaluation (KL 0.0058 for Q8_0, 0.080 for
  Q4_K_M). Between and beyond those two, each bit removed costs the factor that separates them
  (1.93x per bit), so a 3-bit bundle may lose about 2x what a 4-bit one may. The bit width is what the
  format's quant table declares (edgeopt.formats.quant_table: Q4_K_M, IQ4_XS, int4 -> 4; Q8_0, int8 -> 8;
  a quant named like ExecuTorch's 8da4w -> 4, never read from the name); 16 bits and more, and quants
  without one width (gguf MIX), are held to the top-1 floor only. What loses less is the table's too.

A bundle under the floor is not written unless the user accepts the loss (``--accept-quality-loss``);
the manifest then records the figures, the limits and that they were accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeopt import backends
from edgeopt.errors import QualityFloorError

MIN_TOP1_AGREEMENT = 0.80
KL_FACTOR = 5.0
ANCHOR_KL = {8: 0.0058, 4: 0.080}  # llama.cpp Q8_0 and Q4_K_M on SmolLM2-135M-Instruct (issue 35)
KL_PER_BIT = (ANCHOR_KL[4] / ANCHOR_KL[8]) ** (1 / 4)
LOSSLESS_BITS = 16
ACCEPT_FLAG = "--accept-quality-loss"


def nominal_bits(fmt: str, quant: str) -> int | None:
    """The weight bit width ``fmt``'s quant table declares for ``quant`` (Q4_K_M -> 4, bf16 -> 16); None for a
    quant without one width, or one the table does not list."""
    return backends.backend(fmt).quants.weight_bits(quant)


def kl_ceiling(fmt: str, quant: str) -> float | None:
    """The largest KL divergence a bundle of this quant may show; None: no KL limit for it."""
    bits = nominal_bits(fmt, quant)
    if bits is None or bits >= LOSSLESS_BITS or bits < 1:
        return None
    return KL_FACTOR * ANCHOR_KL[8] * KL_PER_BIT ** (8 - bits)


@dataclass(frozen=True)
class FloorVerdict:
    quant: str
    top1_agreement: float
    kl_divergence: float
    kl_limit: float | None
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def record(self, accepted: bool) -> dict[str, Any]:
        """What the manifest keeps under metrics.quality_floor."""
        return {"passed": self.passed, "accepted_below_floor": accepted and not self.passed,
                "min_top1_agreement": MIN_TOP1_AGREEMENT, "max_kl_divergence": self.kl_limit,
                "failures": list(self.failures)}


def judge(metrics: dict[str, Any], fmt: str, quant: str) -> FloorVerdict | None:
    """The verdict on an evaluation's metrics; None when there is nothing to judge (no original to compare
    with, or an embedding bundle, whose quality is in cosines)."""
    if "top1_agreement" not in metrics or "kl_divergence" not in metrics:
        return None
    top1, kl = float(metrics["top1_agreement"]), float(metrics["kl_divergence"])
    limit = kl_ceiling(fmt, quant)
    failures = []
    if top1 < MIN_TOP1_AGREEMENT:
        failures.append(f"top-1 agreement {top1:.1%} < {MIN_TOP1_AGREEMENT:.0%}")
    if limit is not None and kl > limit:
        failures.append(f"KL divergence {kl:.4g} > {limit:.4g} ({KL_FACTOR:g}x what {nominal_bits(fmt, quant)}-bit "
                        "llama.cpp quantization costs)")
    kv_top1 = metrics.get("kv_cache_top1_agreement")  # the quantized KV cache's own step (edgeopt/evaluation/kv_cache.py)
    if kv_top1 is not None and float(kv_top1) < MIN_TOP1_AGREEMENT:
        failures.append(f"the {metrics.get('kv_cache_type')} KV cache alone: top-1 agreement {float(kv_top1):.1%} < "
                        f"{MIN_TOP1_AGREEMENT:.0%} against an f16 cache")
    return FloorVerdict(quant, top1, kl, limit, tuple(failures))


def enforce(verdict: FloorVerdict, metrics: dict[str, Any], accepted: bool, fmt: str, pruned: bool) -> None:
    """Raise QualityFloorError for a verdict under the floor unless the user accepted the loss."""
    if verdict.passed or accepted:
        return
    figures = f"top-1 agreement {verdict.top1_agreement:.1%} (floor {MIN_TOP1_AGREEMENT:.0%}), KL {verdict.kl_divergence:.4g}"
    figures += f" (limit {verdict.kl_limit:.4g})" if verdict.kl_limit is not None else ""
    if "perplexity" in metrics and "perplexity_original" in metrics:
        figures += f", perplexity {metrics['perplexity']:.4g} (original {metrics['perplexity_original']:.4g})"
    raise QualityFloorError(
        f"the {fmt} {verdict.quant} bundle is under the quality floor ({'; '.join(verdict.failures)}): {figures}, "
        f"over {metrics.get('eval_tokens', '?')} tokens of {metrics.get('eval_source', 'text')}; no bundle was written",
        "; ".join(remedies(fmt, verdict.quant, pruned, verdict.failures)) + f"; or pass {ACCEPT_FLAG} to write it "
        "anyway (recorded in the manifest)")


def remedies(fmt: str, quant: str, pruned: bool, failures: tuple[str, ...] = ()) -> list[str]:
    """Options that would lose less, for the refusal's hint."""
    out = []
    if any("KV cache" in failure for failure in failures):
        out.append("use a wider KV cache (--kv-type q8_0 or f16)")
    if pruned:
        out.append("prune less (--prune) or distil longer (--distil-steps)")
    table = backends.backend(fmt).quants
    listed, bits = table.find(quant), table.weight_bits(quant)
    if listed is not None and listed.remedy:
        out.append(listed.remedy)
    elif bits is not None and bits < LOSSLESS_BITS and table.lower_bits_remedy:
        out.append(table.lower_bits_remedy)
    return out or ["use a higher-precision quant"]
