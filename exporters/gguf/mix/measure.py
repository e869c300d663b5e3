"""What each tensor's type would cost in quality, measured two ways and combined.

1. **Weighted rounding error, per tensor and type** (cheap): the tensor quantized as llama.cpp would to
   each palette type (in process, a sample of its rows), de-quantized, compared with the unquantized file:
   sum over rows and columns of ``importance[column] x (w - w_q)^2``, the importance being the matrix's
   mean x^2 (what llama.cpp's quantizer itself minimises; 1 for a tensor the matrix does not cover). It
   ranks types within a tensor and tensors within a group, but not how much a layer's error moves the output.
2. **Measured KL, per group** (a forward pass each): the model with every tensor at Q8_0 except one group
   (a tensor role in a band of layers) at its probe type (palette.py: as many bits as the smallest type,
   quicker to make), scored on calibration text against the unquantized model. The KL the group adds,
   divided by the weighted error it added, converts that group's errors into KL.

So a tensor's predicted cost at a type is ``scale[group] x error[tensor][type]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeopt.errors import ExportError
from edgeopt.exporters.gguf.tensor_data import TensorInfo
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


# A type's error is estimated from every SAMPLED_EVERY-th row (a tensor's rows round alike: on SmolLM2-135M the
# mix chose the same types from an eighth of the rows as from all of them); a tensor of fewer than
# MIN_SAMPLED_ROWS x SAMPLED_EVERY rows is sampled more densely, one of fewer than MIN_SAMPLED_ROWS rows whole.
SAMPLED_EVERY = 8
MIN_SAMPLED_ROWS = 128
ROWS_PER_READ = 4096  # float32 rows held at once: a 128k-token embedding is 1 GB of float32 whole


@dataclass(frozen=True)
class TensorErrors:
    errors: dict[str, float]  # type -> weighted squared rounding error of the whole tensor
    quantized: np.ndarray | None  # the whole tensor's bytes at ``whole_type`` (rows of blocks), when asked


def rounding_errors(info: TensorInfo, data: np.ndarray, types: Iterable[str], importance: np.ndarray | None,
                    threads: int, whole_type: str | None = None) -> TensorErrors:
    """Every type's weighted squared rounding error of one tensor (``data``: its rows as the unquantized file holds
    them): ``sum over rows and columns of importance[column] x (w - w_q)^2``, quantized in process as llama.cpp
    would (exporters/gguf/mix/ggml_rows.py). ``whole_type``'s error is exact, its bytes kept for every row; the
    other types' are estimated from a sample of the rows (SAMPLED_EVERY), scaled to the whole."""
    from edgeopt.exporters.gguf.mix.ggml_rows import dequantize_rows, quantize_rows

    rows = data.reshape(-1, data.shape[-1])
    count = len(rows)
    stride = max(1, min(SAMPLED_EVERY, count // MIN_SAMPLED_ROWS))
    sums: dict[str, float] = {}
    kept: list[np.ndarray] = []
    for first in range(0, count, ROWS_PER_READ):
        original = dequantize_rows(info.type_name, rows[first:first + ROWS_PER_READ])
        sample = original[(-first) % stride::stride]  # every stride-th row of the tensor, wherever the read starts
        for ttype in types:
            whole = ttype == whole_type
            values = original if whole else sample
            if not len(values):
                continue
            quantized = quantize_rows(ttype, values, importance, threads)
            if whole:
                kept.append(quantized)
            squared = np.square(dequantize_rows(ttype, quantized) - values, dtype=np.float64).sum(axis=0)
            weighted = squared @ importance if importance is not None else squared.sum()
            sums[ttype] = sums.get(ttype, 0.0) + float(weighted)
    sampled = len(range(0, count, stride))
    errors = {ttype: error * (1 if ttype == whole_type else count / sampled) for ttype, error in sums.items()}
    return TensorErrors(errors, np.concatenate(kept) if kept else None)


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
