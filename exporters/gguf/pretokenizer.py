"""Which of llama.cpp's named pre-tokenizers matches a tokenizer.json.

A byte-level BPE splits text with regular expressions before merging; llama.cpp does not read the
regexes from the file but selects a built-in set by name (``tokenizer.ggml.pre``). We read the
pre-tokenizer steps from tokenizer.json, reduce them to the sequence of split regexes they apply,
and look that sequence up among the names whose regexes llama.cpp implements identically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.errors import ExportError

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
DIGIT = r"\p{N}"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Sequence of split regexes -> llama.cpp pre-tokenizer name.
KNOWN: dict[tuple[str, ...], str] = {
    (GPT2,): "gpt-2",
    (DIGIT, GPT2): "smollm",
    (LLAMA3,): "llama-bpe",
    (QWEN2,): "qwen2",
}


def _steps(pre: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not pre:
        return []
    if pre.get("type") == "Sequence":
        return [s for p in pre.get("pretokenizers", []) for s in _steps(p)]
    return [pre]


def _regexes(steps: list[dict[str, Any]]) -> tuple[str, ...]:
    out: list[str] = []
    for step in steps:
        kind = step.get("type")
        if kind == "ByteLevel":
            if step.get("add_prefix_space"):
                raise ExportError("tokenizer.json's ByteLevel pre-tokenizer adds a prefix space",
                                  "llama.cpp has no equivalent; use a tokenizer without add_prefix_space")
            if step.get("use_regex", True):
                out.append(GPT2)
        elif kind == "Digits":
            if not step.get("individual_digits"):
                raise ExportError("tokenizer.json splits digit runs (Digits without individual_digits)",
                                  f"supported pre-tokenizers: {', '.join(KNOWN.values())}")
            out.append(DIGIT)
        elif kind == "Split":
            pattern = step.get("pattern", {})
            out.append(pattern.get("Regex") or pattern.get("String") or "")
        else:
            raise ExportError(f"tokenizer.json uses a {kind!r} pre-tokenizer step",
                              f"supported pre-tokenizers: {', '.join(KNOWN.values())}")
    return tuple(out)


def pre_tokenizer_name(tokenizer_json: dict[str, Any], where: Path) -> str:
    """The llama.cpp ``tokenizer.ggml.pre`` name for this tokenizer, or a clear error."""
    regexes = _regexes(_steps(tokenizer_json.get("pre_tokenizer")))
    if regexes in KNOWN:
        return KNOWN[regexes]
    raise ExportError(
        f"the pre-tokenizer of {where} (split regexes {list(regexes)!r}) matches none llama.cpp implements",
        f"supported: {', '.join(KNOWN.values())}; use --format onnx for this model",
    )
