"""Caching off: the prefix cache's null object, so the scheduler treats "no cache" as it treats a cache."""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.engine.prefix_cache import PrefixCacheCounters
from edgeopt.engine.prefix_tree import NO_HIT, NO_LOOKUP, CachedPrefix, Lookup, PrefixHit


class NullPrefixCache:
    """Caching off (``--no-prefix-cache``, or a runtime without cache ids): holds nothing, lends nothing,
    parks nothing and counts no lookups, so the scheduler treats it as it treats a cache."""

    shares_running_prefixes = False
    cells = 0
    evictable = 0
    evicted_total = 0

    def __init__(self) -> None:
        self.counters = PrefixCacheCounters()  # stays at zero: no lookup is made

    def record_query(self, tokens: int) -> None:
        return None

    def record_hit(self, tokens: int) -> None:
        return None

    def preview(self, tokens: list[int], limit: int, namespace: str) -> Lookup:
        return NO_LOOKUP

    def borrow(self, tokens: list[int], limit: int, slot: int, namespace: str) -> PrefixHit:
        return NO_HIT

    def give_back(self, hit: PrefixHit) -> None:
        return None

    def park(self, slot: int, tokens: list[int], namespace: str) -> bool:
        return False

    def snapshot_cells(self, tokens: int) -> int:
        return 0

    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit, namespace: str) -> PrefixHit | None:
        return None

    def adopt(self, tokens: list[int], fill: Callable[[int], bool], namespace: str) -> bool:
        return False

    def entry_holding(self, tokens: list[int], namespace: str) -> int | None:
        return None

    def entry_paths(self) -> list[CachedPrefix]:
        return []

    def can_restore(self, tokens: list[int], namespace: str) -> bool:
        return False

    def restore(self, slot: int, tokens: list[int], namespace: str) -> bool:
        return False

    def evict(self, cells: int) -> int:
        return 0

    def clear(self) -> int:
        return 0
