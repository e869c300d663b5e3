"""4-bit blocks whose scale and zero point are searched for, weighing each weight by how much its input matters.

onnxruntime's round-to-nearest takes a block's scale from its extremes: one large weight coarsens the other 31,
and every input column counts the same though a trained decoder's activations differ a hundredfold between
columns. Here each block of 32 weights (along the input, MatMulNBits' layout) tries scales on a grid around
range / 15 and, for each, the integer zero points next to the one its minimum asks for; each candidate's scale is
then refit by weighted least squares with its levels fixed, and the candidate with the least weighted squared
error wins. A weight's weight is its input column's mean squared activation on calibration text times
sqrt(mean square of the block + its own square), the weighting llama.cpp's k-quants use with an importance
matrix; without calibration text, its own square (a large weight matters more).

Zero points stay integers (4 bits, packed): MatMulNBits computes in int8 with them (accuracy level 4). Float
zero points would represent the SmolLM2 fixture's Q4_1 grid exactly (exporters/onnx/quantize.py) and measure
an artefact, not the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVELS = 15  # 4 bits: levels 0..15
SCALE_STEPS = 20  # candidate scales: (15 + (k - 10) / 10) / range for k = 0..20, as llama.cpp's make_qkx2 grids
ROWS_PER_PASS = 1 << 17  # blocks searched at once: ~16 MB per float32 temporary, whatever the model's size


@dataclass(frozen=True)
class Int4Blocks:
    """MatMulNBits' initializers for a weight of N output rows and K inputs in blocks of ``block``."""

    packed: np.ndarray  # uint8 (N, K/block, block/2): level of element 2i in the low nibble, 2i+1 in the high
    scales: np.ndarray  # float32 (N, K/block)
    zero_points: np.ndarray  # uint8 (N, ceil(K/block / 2)): block 2j's zero point in the low nibble

    def dequantized(self) -> np.ndarray:
        """The (N, K) float32 weight the blocks stand for."""
        n, blocks, half = self.packed.shape
        levels = np.empty((n, blocks, half * 2), dtype=np.float32)
        levels[..., 0::2], levels[..., 1::2] = self.packed & 0x0F, self.packed >> 4
        zero = np.empty((n, self.zero_points.shape[1] * 2), dtype=np.float32)
        zero[:, 0::2], zero[:, 1::2] = self.zero_points & 0x0F, self.zero_points >> 4
        weight = (levels - zero[:, :blocks, None]) * self.scales[..., None]
        return weight.reshape(n, blocks * half * 2)


def search_int4_blocks(weight: np.ndarray, importance: np.ndarray | None, block: int = 32) -> Int4Blocks:
    """Quantize ``weight`` (N outputs x K inputs) given each input column's mean squared activation
    ``importance`` (length K) or None. K is padded with zeros up to whole blocks, as MatMulNBits pads it."""
    import torch

    n, k = weight.shape
    pad = -k % block
    padded = np.zeros((n, k + pad), dtype=np.float32)
    padded[:, :k] = weight
    w = torch.from_numpy(padded).reshape(-1, block)
    column = None if importance is None else torch.from_numpy(np.pad(np.asarray(importance, np.float32), (0, pad)))
    k += pad
    levels = torch.empty(w.shape, dtype=torch.uint8)
    scales = torch.empty(w.shape[0], dtype=torch.float32)
    zeros = torch.empty(w.shape[0], dtype=torch.uint8)
    blocks_per_row = k // block
    for start in range(0, w.shape[0], ROWS_PER_PASS):
        part = w[start:start + ROWS_PER_PASS]
        if column is None:
            weights = part * part + 1e-12
        else:
            first = start % blocks_per_row  # the first block's position along K, so each block meets its columns
            idx = (torch.arange(part.shape[0]) + first) % blocks_per_row
            col = column.reshape(blocks_per_row, block)[idx]
            weights = col * torch.sqrt((part * part).mean(1, keepdim=True) + part * part) + 1e-20
        q, s, z = _search(part, weights)
        levels[start:start + part.shape[0]], scales[start:start + part.shape[0]] = q, s
        zeros[start:start + part.shape[0]] = z
    return _pack(levels.numpy().reshape(n, blocks_per_row, block), scales.numpy().reshape(n, blocks_per_row),
                 zeros.numpy().reshape(n, blocks_per_row))


def _search(w, weights):  # torch tensors (blocks, block) -> levels, scales, zero points of the best candidate
    import torch

    low = w.min(1, keepdim=True).values.clamp(max=0)  # 0 stays representable, as onnxruntime's RTN keeps it
    span = (w.max(1, keepdim=True).values.clamp(min=0) - low).clamp(min=1e-12)
    best_err = torch.full_like(low, float("inf"))
    best_scale, best_zero = span / LEVELS, torch.zeros_like(low)
    for step in range(SCALE_STEPS + 1):
        scale = span / (LEVELS + (step - SCALE_STEPS / 2) / 10)
        centre = torch.round(-low / scale)
        for shift in (-1.0, 0.0, 1.0):
            zero = (centre + shift).clamp(0, LEVELS)
            d = torch.clamp(torch.round(w / scale + zero), 0, LEVELS) - zero
            fitted = (weights * w * d).sum(1, keepdim=True) / (weights * d * d).sum(1, keepdim=True).clamp(min=1e-30)
            fitted = torch.where(fitted > 0, fitted, scale)
            for candidate in (scale, fitted):
                error = (weights * (w - (torch.clamp(torch.round(w / candidate + zero), 0, LEVELS) - zero)
                                    * candidate) ** 2).sum(1, keepdim=True)
                better = error < best_err
                best_err = torch.where(better, error, best_err)
                best_scale = torch.where(better, candidate, best_scale)
                best_zero = torch.where(better, zero, best_zero)
    levels = torch.clamp(torch.round(w / best_scale + best_zero), 0, LEVELS).to(torch.uint8)
    return levels, best_scale.squeeze(1), best_zero.squeeze(1).to(torch.uint8)


def _pack(levels: np.ndarray, scales: np.ndarray, zeros: np.ndarray) -> Int4Blocks:
    packed = (levels[..., 0::2] | (levels[..., 1::2] << 4)).astype(np.uint8)
    n, blocks = zeros.shape
    padded = np.zeros((n, blocks + blocks % 2), dtype=np.uint8)
    padded[:, :blocks] = zeros
    zero_points = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
    return Int4Blocks(packed, scales.astype(np.float32), zero_points)
