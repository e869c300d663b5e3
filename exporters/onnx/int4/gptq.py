"""4-bit blocks rounded with error compensation (GPTQ, Frantar et al. 2022) in MatMulNBits' own layout.

The weighted search (exporters/onnx/int4/search.py) rounds every weight to its nearest level: each weight's error
is as small as its block's grid allows, but the errors of one output row add up in the dot product with the
input, and a trained decoder's inputs are correlated. What a layer loses is the change of its output,
``E X`` for the error ``E`` and the inputs ``X`` of the calibration text, whose mean square is
``trace(E H E^T)`` with ``H = X^T X / tokens`` (the input's Gram matrix). GPTQ lowers that: the columns (inputs) are
rounded in order, and each column's rounding error is spread over the columns not yet rounded, in the proportions
that cancel it best given ``H`` (the rows of the inverse Hessian's Cholesky factor). A block's scale and zero point
are chosen by the weighted search when the block's first column is reached, from the weights as they stand then
(already compensated for the blocks before it), so the written blocks are exactly MatMulNBits' 4-bit layout:
levels 0..15, one fp32 scale and one integer zero point per block of ``block`` inputs.

Pure torch on the CPU, float64 for the factorizations; O(N K^2) per weight of N outputs and K inputs.
"""

from __future__ import annotations

import numpy as np

from edgeopt.exporters.onnx.int4.search import LEVELS, Int4Blocks, _pack, _search

DAMPING = 0.01  # added to H's diagonal, as a fraction of its mean: GPTQ's default, keeps H invertible


def output_error(weight: np.ndarray, approximation: np.ndarray, gram: np.ndarray) -> float:
    """Mean squared change of the layer's output over the calibration tokens: trace(E H E^T), E the error."""
    import torch

    error = torch.from_numpy(np.ascontiguousarray(weight - approximation[:, :weight.shape[1]], dtype=np.float64))
    return float(((error @ torch.from_numpy(np.asarray(gram, np.float64))) * error).sum())


def gptq_int4_blocks(weight: np.ndarray, gram: np.ndarray, block: int = 32, damping: float = DAMPING) -> Int4Blocks:
    """Quantize ``weight`` (N outputs x K inputs) into 4-bit blocks of ``block`` inputs, minimizing the output error
    under the inputs' Gram matrix ``gram`` (K x K, mean of x x^T over calibration tokens). K is padded with zeros up
    to whole blocks, as MatMulNBits pads it."""
    import torch

    n, k = weight.shape
    padded_k = k + -k % block
    w = torch.zeros((n, padded_k), dtype=torch.float32)
    w[:, :k] = torch.from_numpy(np.asarray(weight, np.float32))
    upper = _inverse_factor(gram, k, padded_k, damping)
    importance = torch.diagonal(upper).new_tensor(np.pad(np.diag(gram), (0, padded_k - k))).float()
    levels = torch.empty((n, padded_k), dtype=torch.uint8)
    scales = torch.empty((n, padded_k // block), dtype=torch.float32)
    zeros = torch.empty((n, padded_k // block), dtype=torch.uint8)
    for b, start in enumerate(range(0, padded_k, block)):
        end = start + block
        part = w[:, start:end]
        weights = importance[start:end] * torch.sqrt((part * part).mean(1, keepdim=True) + part * part) + 1e-20
        _, scale, zero = _search(part, weights)
        scales[:, b], zeros[:, b] = scale, zero
        s, z = scale[:, None], zero[:, None].float()
        errors = torch.empty((n, block), dtype=torch.float32)
        for i in range(block):
            column = part[:, i:i + 1]
            q = torch.clamp(torch.round(column / s + z), 0, LEVELS)
            levels[:, start + i] = q[:, 0].to(torch.uint8)
            err = (column - (q - z) * s) / upper[start + i, start + i]
            part[:, i + 1:] -= err * upper[start + i, start + i + 1:end]
            errors[:, i:i + 1] = err
        if end < padded_k:  # the columns after this block take its errors at once (GPTQ's lazy batch)
            w[:, end:] -= errors @ upper[start:end, end:]
    return _pack(levels.numpy().reshape(n, -1, block), scales.numpy(), zeros.numpy())


def _inverse_factor(gram: np.ndarray, k: int, padded_k: int, damping: float):  # -> torch.Tensor (padded_k^2)
    """The upper Cholesky factor of H^-1 (H damped; inputs never seen and padding get a unit diagonal), float32."""
    import torch

    h = torch.eye(padded_k, dtype=torch.float64)
    h[:k, :k] = torch.from_numpy(np.asarray(gram, np.float64))
    diagonal = torch.diagonal(h)
    dead = diagonal <= 0
    h[dead, :], h[:, dead] = 0.0, 0.0
    diagonal[dead] = 1.0
    diagonal += damping * float(diagonal.mean())
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(h))
    return torch.linalg.cholesky(inverse, upper=True).float()
