"""Per-slot KV storage for the CPU torch runtime, and the glue to transformers' ``DynamicCache``.

Each slot keeps, per layer, one key and one value tensor of shape (1, kv_heads, length, head_dim).
A forward pass gets a fresh ``DynamicCache`` filled from the slots it touches; after the pass the
grown tensors are read back. Several decoding slots of different lengths share one forward by
*left-padding* their caches to the longest one; the padding is masked out and each row keeps its own
``position_ids``, so every row computes exactly what a forward of that slot alone would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class SlotKV:
    keys: list[torch.Tensor] = field(default_factory=list)  # one per layer, (1, heads, length, dim)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0


def cache_for_slot(slot: SlotKV) -> DynamicCache:
    """A DynamicCache holding the slot's past (empty for a fresh slot)."""
    cache = DynamicCache()
    for layer, (k, v) in enumerate(zip(slot.keys, slot.values)):
        cache.update(k, v, layer)
    return cache


def read_back(cache: DynamicCache) -> SlotKV:
    """The cache's tensors after a batch-of-one forward: the slot's whole KV."""
    return SlotKV(keys=[layer.keys for layer in cache.layers], values=[layer.values for layer in cache.layers])


def padded_cache(slots: list[SlotKV]) -> tuple[DynamicCache, torch.Tensor]:
    """Left-pad the slots' KV to a common length; return the batched cache and its 2D attention mask
    (1 = real position, 0 = padding) covering the past plus one new token per row."""
    longest = max(s.length for s in slots)
    num_layers = len(slots[0].keys)
    mask = torch.zeros(len(slots), longest + 1, dtype=torch.long)
    for row, slot in enumerate(slots):
        mask[row, longest - slot.length:] = 1
    cache = DynamicCache()
    for layer in range(num_layers):
        cache.update(_stack_left_padded([s.keys[layer] for s in slots], longest),
                     _stack_left_padded([s.values[layer] for s in slots], longest), layer)
    return cache, mask


def append_last_token(slots: list[SlotKV], cache: DynamicCache) -> None:
    """After a padded decode forward, append each row's newest K/V (the last position) to its slot."""
    for row, slot in enumerate(slots):
        for layer, cached in enumerate(cache.layers):
            slot.keys[layer] = torch.cat([slot.keys[layer], cached.keys[row:row + 1, :, -1:]], dim=2)
            slot.values[layer] = torch.cat([slot.values[layer], cached.values[row:row + 1, :, -1:]], dim=2)


def _stack_left_padded(tensors: list[torch.Tensor], length: int) -> torch.Tensor:
    first = tensors[0]
    out = first.new_zeros((len(tensors), first.shape[1], length, first.shape[3]))
    for row, tensor in enumerate(tensors):
        out[row, :, length - tensor.shape[2]:] = tensor[0]
    return out
