"""What llama.cpp's quantizer made of a model: the per-tensor type mix (read back from the file it
wrote) and the fallbacks it took (from its log), as manifest facts and a two-line summary.

A quant name like ``Q4_K_M`` is a recipe, not a result: llama.cpp keeps some tensors at Q6_K, and a
tensor whose rows do not divide into the type's blocks falls back to another type. The manifest records
what each group of tensors actually got, so a bundle says what it holds.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from edgeopt.exporters.gguf.llama_log import LlamaLog, fallback_facts

_BLOCK_PREFIX = re.compile(r"^blk\.\d+\.")


def tensor_role(name: str) -> str:
    """``blk.12.attn_q.weight`` -> ``attn_q.weight``: the tensor's job, the same in every block."""
    return _BLOCK_PREFIX.sub("", name)


def tensor_type_mix(gguf_path: Path) -> dict[str, dict[str, int]]:
    """{role: {type: tensors}} of a GGUF file, roles and types sorted by name. Read with edgeopt's header reader:
    gguf-py's GGUFReader decodes every metadata array first (a 128k vocabulary's strings, seconds)."""
    from gguf import GGMLQuantizationType

    from edgeopt.sources.gguf_metadata import read_gguf_metadata

    mix: dict[str, Counter[str]] = {}
    for name, type_id in read_gguf_metadata(gguf_path).tensor_types.items():
        mix.setdefault(tensor_role(name), Counter())[GGMLQuantizationType(type_id).name] += 1
    return {role: dict(sorted(types.items())) for role, types in sorted(mix.items())}


def quantize_facts(gguf_path: Path, llama_log: LlamaLog) -> dict[str, Any]:
    """The manifest's ``export`` entries for a quantized file."""
    return {"tensor_types": tensor_type_mix(gguf_path), "quantize_fallbacks": fallback_facts(llama_log.fallbacks())}


def summary_lines(details: dict[str, Any]) -> list[str]:
    """One line for the type mix, one for the fallbacks (when there were any), from the export facts."""
    mix: dict[str, dict[str, int]] | None = details.get("tensor_types")
    if not mix:
        return []
    totals: Counter[str] = Counter()
    for types in mix.values():
        totals.update(types)
    lines = [f"quantize: {sum(totals.values())} tensors: "
             + ", ".join(f"{n} {name}" for name, n in totals.most_common())]
    fallbacks: list[dict[str, Any]] = details.get("quantize_fallbacks") or []
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for fallback in fallbacks:
        by_reason.setdefault(str(fallback["reason"]), []).append(fallback)
    for reason, items in by_reason.items():
        moved = ", ".join(f"{f['tensors']} {f['wanted']} -> {f['used']}" for f in items)
        lines.append(f"quantize: {sum(f['tensors'] for f in items)} tensors fell back ({reason}): {moved}")
    return lines
