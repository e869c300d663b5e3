"""The KV cells and runtime slots a scheduler hands out, with the prefix cache that lives inside them.

Three books kept together, because every move touches more than one: :class:`~edgeopt.engine.kv_budget.
KvBudget` counts the cells running sequences hold, :class:`~edgeopt.engine.kv_budget.SlotPool` the runtime
slots, and the prefix cache (:mod:`edgeopt.engine.prefix_cache`) the cells it keeps and lends. A cell the
cache keeps is not free, but it is evictable: whoever needs cells evicts cached ones first
(:meth:`KvCells.evict_cached`). The scheduler decides *who* gets cells; this class says how many there are
and moves them (admission's arithmetic, borrowing a cached prefix, parking a finished sequence's KV, and
caching a running sequence's prefix for the prompts waiting on it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from edgeopt.engine.kv_budget import KvBudget, SlotPool
from edgeopt.engine.null_prefix_cache import NullPrefixCache
from edgeopt.engine.prefix_cache import PrefixReuse
from edgeopt.engine.prefix_tree import NO_HIT
from edgeopt.engine.sequence import Sequence

log = logging.getLogger(__name__)
T = TypeVar("T")


class KvCells:
    def __init__(self, capacity_tokens: int, slots: int, release_slot: Callable[[int], None],
                 cache: PrefixReuse | None = None) -> None:
        self.kv = KvBudget(capacity_tokens)
        self.cache: PrefixReuse = cache or NullPrefixCache()
        self.slots = SlotPool(slots)
        self._release_slot = release_slot  # the runtime's release(): drops the slot's KV storage

    @property
    def free(self) -> int:
        """Cells neither running sequences nor the cache hold."""
        return self.kv.free - self.cache.cells

    def evict_cached(self, tokens: int) -> None:
        """Evict cached prefixes (least recently used first) until ``tokens`` cells are free, if they can be."""
        if self.free < tokens:
            self.cache.evict(tokens - self.free)

    def allocate(self, seq: Sequence, tokens: int) -> None:
        assert seq.slot is not None and tokens <= self.free, (seq, tokens, self.free)
        self.kv.allocate(seq.slot, tokens)

    def can_hold(self, seq: Sequence, running: list[Sequence]) -> bool:
        """Whether ``seq``'s whole prompt fits beside what the ``running`` sequences still need."""
        # Cells that admitted sequences still need before they produce a token stay spoken for
        # (tokens without a cell yet: cells of chunks scheduled this step are already allocated).
        promised = sum(s.num_tokens - self.kv.held(s.slot) - s.borrowed_cells for s in running if s.slot is not None)
        lookup = self.cache.preview(seq.all_ids, seq.num_tokens - 1, seq.cache_namespace)
        needed = seq.num_pending - (lookup.lent if lookup.from_cache else 0)  # a copy spends new cells
        evictable = self.cache.evictable - lookup.pinned
        return self.free + evictable - promised >= needed

    def borrow_prefix(self, seq: Sequence) -> None:
        """A newly admitted ``seq`` starts from the longest cached prefix of its tokens (all but the last)."""
        assert seq.slot is not None and seq.num_computed == 0
        self.cache.record_query(seq.num_tokens)
        lookup = self.cache.preview(seq.all_ids, seq.num_tokens - 1, seq.cache_namespace)
        if not lookup.from_cache:  # the copy lands in the slot: make room for it first
            self.evict_cached(lookup.lent)
            if self.free < lookup.lent:
                return
        hit = self.cache.borrow(seq.all_ids, seq.num_tokens - 1, seq.slot, seq.cache_namespace)
        if seq.cached_prompt_tokens is None:
            seq.cached_prompt_tokens = min(hit.tokens, len(seq.prompt_ids))
        if hit.tokens == 0:
            return
        seq.prefix_hit = hit
        seq.num_computed = hit.tokens
        if not hit.pinned:
            self.kv.allocate(seq.slot, hit.tokens)
        self.cache.record_hit(hit.tokens)

    def cache_running_prefix(self, owner: Sequence, tokens: int) -> None:
        """Make the first ``tokens`` of running ``owner``'s prompt a cache entry (waiting prompts borrow it)."""
        assert owner.slot is not None
        new_cells = self.cache.snapshot_cells(tokens)  # an entry that copies the prefix needs room first
        if new_cells:
            self.evict_cached(new_cells)
            if self.free < new_cells:
                return
        try:
            hit = self.cache.snapshot(owner.slot, owner.prompt_ids[:tokens], owner.prefix_hit, owner.cache_namespace)
        except Exception:  # noqa: BLE001 - the waiting prompt then computes the prefix itself
            log.exception("caching the prefix of running %s failed", owner.request_id)
            return
        if hit is not None and hit.pinned:  # shared cells: the owner now borrows them from the entry
            self.kv.hand_over(owner.slot, hit.tokens - owner.borrowed_cells)
            owner.prefix_hit = hit

    def park(self, seq: Sequence) -> None:
        """Keep a retired sequence's computed KV in the cache (its slot is freed after)."""
        assert seq.slot is not None
        try:
            self.cache.park(seq.slot, seq.all_ids[:seq.num_computed], seq.cache_namespace)
        except Exception:  # noqa: BLE001 - losing a cache entry must not lose the request's ending
            log.exception("keeping the KV of %s in the prefix cache failed; dropping it", seq.request_id)

    def free_slot(self, seq: Sequence) -> None:
        assert seq.slot is not None
        self.cache.give_back(seq.prefix_hit)
        seq.prefix_hit = NO_HIT
        self.kv.release(seq.slot)
        self._release_slot(seq.slot)
        self.slots.release(seq.slot)
        seq.slot = None

    def adopt(self, tokens: list[int], fill: Callable[[int], bool], namespace: str) -> bool:
        """Add a cache entry of ``namespace`` whose KV ``fill(cache_id)`` loads; evicts other entries to make
        room, and refuses (False) when the entry cannot fit beside the running sequences' cells."""
        self.evict_cached(len(tokens))
        return self.free >= len(tokens) and self.cache.adopt(tokens, fill, namespace)

    def use_entry(self, tokens: list[int], use: Callable[[int], T], namespace: str) -> T | None:
        """``use(sequence id)`` of the entry of ``namespace`` holding exactly ``tokens``; None when none does."""
        seq_id = self.cache.entry_holding(tokens, namespace)
        return None if seq_id is None else use(seq_id)

    def restore(self, tokens: list[int], fill: Callable[[int], bool], namespace: str) -> bool:
        """Add a cache entry for ``tokens`` whose KV ``fill(slot)`` loads into a free running slot (a saved state
        of a swapped-out model), kept as a finished sequence's KV is (:meth:`PrefixReuse.restore`). Evicts
        nothing: False when no slot, no cache id or too few free cells are left, or when ``fill`` refuses."""
        if not self.slots.available or self.free < len(tokens) or not self.cache.can_restore(tokens, namespace):
            return False
        slot = self.slots.acquire()
        try:
            return fill(slot) and self.cache.restore(slot, tokens, namespace)
        finally:  # the slot's own copy of the cells goes (on shared cells, the entry keeps its tags)
            self._release_slot(slot)
            self.slots.release(slot)
