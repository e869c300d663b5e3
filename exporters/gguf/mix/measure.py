"""What each tensor's type would cost in quality, measured two ways and combined.

1. **Weighted rounding error, per tensor and type** (cheap, exact): the tensor quantized by llama.cpp to
   each palette type, de-quantized, compared with the unquantized file: sum over rows and columns of
   ``importance[column] x (w - w_q)^2``, the importance being the matrix's mean x^2 (what llama.cpp's
   quantizer itself minimises; 1 for a tensor the matrix does not cover). It ranks types within a tensor
   and tensors within a group, but not how much a layer's error moves the output.
2. **Measured KL, per group** (a forward pass each): the model with every tensor at Q8_0 except one group
   (a tensor role in a band of layers) at its smallest type, scored on calibration text against the
   unquantized model. The KL the group adds, divided by the weighted error it added, converts that
   group's errors into KL.

So a tensor's predicted cost at a type is ``scale[group] x error[tensor][type]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.measuring.scorers import Scorer

_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class QuantizedTensor:
    name: str
    row_length: int
    weights: int


def quantized_tensors(reference_file: Path, reference_type: str) -> list[QuantizedTensor]:
    """The tensors llama.cpp quantized in a file made at ``reference_type`` everywhere (norms and other
    tensors it keeps in float are not part of any mix)."""
    from edgeopt.exporters.gguf.tensor_data import tensor_infos

    return [QuantizedTensor(t.name, t.row_length, t.elements) for t in tensor_infos(reference_file).values()
            if t.type_name == reference_type]


def group_of(name: str, n_layers: int, bands: int) -> str:
    """``blk.12.attn_v.weight`` -> ``attn_v.weight@12-17`` (its role in a band of layers); other tensors
    (embeddings, output) are a group of their own."""
    found = _BLOCK.match(name)
    if found is None:
        return name
    layer, role = int(found.group(1)), found.group(2)
    size = -(-n_layers // bands)
    first = layer // size * size
    return f"{role}@{first}-{min(first + size, n_layers) - 1}"


def weighted_errors(source: Path, ttype: str, typed_file: Path, names: Iterable[str],
                    importance: dict[str, np.ndarray]) -> dict[str, float]:
    """{tensor: weighted squared rounding error} for the tensors of ``names`` that ``typed_file`` holds at
    ``ttype`` (one it kept at another type, a fallback, is left out)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from edgeopt.exporters.gguf.tensor_data import tensor_bytes

    typed = [(info, data) for info, data in tensor_bytes(typed_file, names) if info.type_name == ttype]
    originals = {info.name: (info, data) for info, data in tensor_bytes(source, [info.name for info, _ in typed])}
    errors: dict[str, float] = {}
    for info, data in typed:
        original, original_data = originals[info.name]
        diff = (dequantize(data, GGMLQuantizationType[ttype])
                - dequantize(original_data, GGMLQuantizationType[original.type_name]))
        weights = importance.get(info.name)
        squared = np.square(diff, dtype=np.float64).sum(axis=0)  # per column
        errors[info.name] = float(squared @ weights if weights is not None else squared.sum())
    return errors


class ReferenceDistribution:
    """The unquantized model's next-token distributions on the calibration chunks, kept to score others."""

    def __init__(self, scorer: Scorer, chunks: list[list[int]]) -> None:
        self.chunks = chunks
        self._probs: list[np.ndarray] = []
        self._neg_entropy: list[np.ndarray] = []
        for chunk in chunks:
            logp = _log_softmax(scorer.score(chunk))
            probs = np.exp(logp)
            self._probs.append(probs)
            self._neg_entropy.append((probs * logp).sum(axis=1))

    def mean_kl(self, scorer: Scorer) -> float:
        """Mean KL(reference || candidate) per token over every chunk."""
        total, count = 0.0, 0
        for chunk, probs, neg_entropy in zip(self.chunks, self._probs, self._neg_entropy):
            logq = _log_softmax(scorer.score(chunk))
            kl = neg_entropy - (probs * logq).sum(axis=1)
            total += float(kl.sum())
            count += len(kl)
        if count == 0:
            raise ExportError("no calibration tokens to measure sensitivity on", "give a longer --calibration-data")
        return total / count


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
