"""A batched KV cache kept between decode steps, so steady-state decoding copies no KV in Python.

While the same slots decode in the same order step after step (the common case under continuous
batching), the ``present`` outputs of one step are exactly the ``past`` inputs of the next: the
group feeds them back unchanged and only grows the attention mask by one column. Rows are
left-padded to the longest slot; padded positions are masked out and position ids are per row, so
the result equals running each slot alone. When the batch changes (a slot joins, leaves, rewinds or
prefills), the group is split back into per-slot arrays and a new one is formed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeopt.runtimes.onnxruntime.decoder_session import KV, DecoderLayout


@dataclass
class DecodeGroup:
    slots: tuple[int, ...]
    lengths: list[int]  # real cached tokens of each row
    kv: KV  # each (rows, kv_heads, width, head_dim), row r's tokens in its last lengths[r] positions
    mask: np.ndarray  # (rows, width) int64, 1 on real positions

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def continues(self, slots: tuple[int, ...], start_positions: list[int]) -> bool:
        """True when a decode step of these slots at these positions extends every row by one token."""
        return slots == self.slots and start_positions == self.lengths

    def row_kv(self, row: int) -> KV:
        """Copy of one row's real positions (a copy, so a split group frees its padded arrays)."""
        n = self.lengths[row]
        return [np.ascontiguousarray(a[row:row + 1, :, self.width - n:]) for a in self.kv]


def form_group(slots: tuple[int, ...], pasts: list[KV], lengths: list[int], layout: DecoderLayout) -> DecodeGroup:
    """Left-pad each slot's past to the longest and stack them into one batch."""
    longest = max(lengths)
    rows = len(slots)
    kv: KV = []
    for j in range(len(layout.kv_input_names)):
        arr = np.zeros((rows, layout.kv_heads, longest, layout.head_dim), dtype=layout.kv_dtype)
        for row, (past, n) in enumerate(zip(pasts, lengths)):
            if n:
                arr[row, :, longest - n:] = past[j][0]
        kv.append(arr)
    mask = np.zeros((rows, longest), dtype=np.int64)
    for row, n in enumerate(lengths):
        mask[row, longest - n:] = 1
    return DecodeGroup(slots, list(lengths), kv, mask)


def step_inputs(group: DecodeGroup, tokens: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """input_ids, attention_mask (past + the new column) and position_ids of one decode step."""
    ids = np.asarray(tokens, dtype=np.int64)[:, None]
    mask = np.concatenate([group.mask, np.ones((len(tokens), 1), dtype=np.int64)], axis=1)
    pos = np.asarray(group.lengths, dtype=np.int64)[:, None]
    return ids, mask, pos


def advance(group: DecodeGroup, present: KV, mask: np.ndarray) -> None:
    """Adopt the step's outputs as the group's KV: every row is one token longer."""
    group.kv = present
    group.mask = mask
    group.lengths = [n + 1 for n in group.lengths]
