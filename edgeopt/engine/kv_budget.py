"""KV cache accounting: token cells shared by all sequences, and the pool of runtime slots.

The engine never measures memory; it receives a capacity in tokens (see :func:`edgeopt.sizing.budget.size_kv`)
and keeps the books here. llama.cpp's unified KV cache allocates one cell per token, so the unit is a
token, not a block. A cell is counted as used from the moment a step that writes it is scheduled.
``KvBudget`` counts the cells running sequences hold themselves; the prefix cache's cells (and the ones
sequences borrow from it) are its own count (:mod:`edgeopt.engine.prefix_cache`), which the scheduler
subtracts from what is free.
"""

from __future__ import annotations


class KvBudget:
    def __init__(self, capacity_tokens: int) -> None:
        assert capacity_tokens > 0, capacity_tokens
        self.capacity = capacity_tokens
        self._held: dict[int, int] = {}  # slot -> cells it holds
        self.used = 0

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def can_allocate(self, tokens: int) -> bool:
        return tokens <= self.free

    def allocate(self, slot: int, tokens: int) -> None:
        # Invariant: callers check can_allocate first; overdrawing would crash the runtime.
        assert 0 < tokens <= self.free, (tokens, self.free)
        self._held[slot] = self._held.get(slot, 0) + tokens
        self.used += tokens

    def release(self, slot: int) -> int:
        """Give back every cell the slot holds; returns how many."""
        tokens = self._held.pop(slot, 0)
        self.used -= tokens
        return tokens

    def give_back(self, slot: int, tokens: int) -> None:
        """The slot no longer holds ``tokens`` of its cells (rejected drafted tokens' KV was dropped)."""
        assert 0 <= tokens <= self._held.get(slot, 0), (slot, tokens, self._held.get(slot, 0))
        self._held[slot] -= tokens
        self.used -= tokens

    def hand_over(self, slot: int, tokens: int) -> None:
        """``tokens`` of the cells the slot holds are now the prefix cache's (shared with the slot)."""
        assert 0 <= tokens <= self._held.get(slot, 0), (slot, tokens, self._held.get(slot, 0))
        self._held[slot] = self._held.get(slot, 0) - tokens
        self.used -= tokens

    def held(self, slot: int) -> int:
        return self._held.get(slot, 0)


class SlotPool:
    """Runtime sequence ids (llama.cpp ``seq_id``); lowest free id first, so small runs reuse slot 0."""

    def __init__(self, size: int) -> None:
        assert size > 0, size
        self.size = size
        self._free = list(range(size - 1, -1, -1))  # a stack: pop() gives the lowest id

    @property
    def available(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        assert self._free, "no free slot"
        return self._free.pop()

    def release(self, slot: int) -> None:
        assert 0 <= slot < self.size and slot not in self._free, slot
        self._free.append(slot)
        self._free.sort(reverse=True)
