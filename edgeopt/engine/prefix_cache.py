"""Automatic prefix caching: KV of finished requests kept in a radix tree of token ids
(:mod:`edgeopt.engine.prefix_tree`), reused by later prompts.

Storage: each *leaf* owns one runtime sequence id from ``cache_ids`` whose KV is the leaf's whole path
from the root; an inner node's KV is reached through any leaf below it. What that KV costs and how it is
lent depends on how the runtime stores it, one implementation per way, chosen once when the engine starts
(:mod:`edgeopt.engine.prefix_cache_modes`): shared cells (llama.cpp's unified cache), copies (ONNX,
llama.cpp's per-sequence streams), or no cache at all (:mod:`edgeopt.engine.null_prefix_cache`, so the scheduler
never asks whether there is one).

Namespaces (tenants of a server with API keys): a prompt borrows only from its own namespace's entries and the
operator's (:data:`~edgeopt.engine.prefix_tree.OPERATOR_NAMESPACE`), and parks only in its own. Eviction ranks
every namespace's leaves together (one pool of cells).

Eviction removes the least recently used unpinned leaf; its parent inherits the leaf's sequence id
(trimmed) when it has no other child, so every leaf keeps its KV and every inner node stays reachable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from edgeopt.engine.prefix_tree import (OPERATOR_NAMESPACE, CachedPrefix, Lookup, Match, Node, PrefixHit,
                                        RadixTree)


class PrefixStorage(Protocol):
    """The runtime operations the cache drives (a subset of :class:`edgeopt.runtimes.base.Runtime`)."""

    def share_kv(self, source: int, target: int, start: int, end: int) -> None: ...

    def move_kv(self, source: int, target: int) -> None: ...

    def trim(self, slot: int, tokens: int) -> None: ...

    def release(self, slot: int) -> None: ...


@dataclass
class PrefixCacheCounters:
    queries: int = 0  # sequences admitted while a cache was on (each looks its tokens up once)
    hits: int = 0  # of those, sequences that borrowed a cached prefix
    query_tokens: int = 0  # tokens they had to compute without a cache
    hit_tokens: int = 0  # tokens borrowed instead of computed


class PrefixReuse(Protocol):
    """What the scheduler asks of a prefix cache (or of its absence: :class:`NullPrefixCache`)."""

    cells: int  # KV cells the cache is charged for
    evictable: int  # of those, cells eviction could free now
    evicted_total: int  # cells evicted since start (clear() included)
    counters: PrefixCacheCounters
    # Prompts that share a prefix with a running sequence wait for it and borrow it from here; without a
    # cache there is nothing to borrow from, so they do not wait.
    shares_running_prefixes: bool

    def record_query(self, tokens: int) -> None: ...

    def record_hit(self, tokens: int) -> None: ...

    def preview(self, tokens: list[int], limit: int, namespace: str) -> Lookup: ...

    def borrow(self, tokens: list[int], limit: int, slot: int, namespace: str) -> PrefixHit: ...

    def give_back(self, hit: PrefixHit) -> None: ...

    def park(self, slot: int, tokens: list[int], namespace: str) -> bool: ...

    def snapshot_cells(self, tokens: int) -> int: ...

    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit, namespace: str) -> PrefixHit | None: ...

    def adopt(self, tokens: list[int], fill: Callable[[int], bool], namespace: str) -> bool: ...

    def entry_holding(self, tokens: list[int], namespace: str) -> int | None: ...

    def entry_paths(self) -> list[CachedPrefix]: ...

    def can_restore(self, tokens: list[int], namespace: str) -> bool: ...

    def restore(self, slot: int, tokens: list[int], namespace: str) -> bool: ...

    def evict(self, cells: int) -> int: ...

    def clear(self) -> int: ...


class PrefixCache(ABC):
    """The tree, its eviction and parking: what every storage mode shares."""

    shares_running_prefixes = True

    def __init__(self, storage: PrefixStorage, cache_ids: range) -> None:
        assert len(cache_ids) > 0, cache_ids
        self._storage = storage
        self._free_ids = sorted(cache_ids, reverse=True)
        self._tree = RadixTree()
        self.cells = 0  # KV cells the cache is charged for (see the mode's _recount)
        self.evictable = 0  # of those, cells eviction could free now
        self.evicted_total = 0  # cells evicted since start (clear() included)
        self.counters = PrefixCacheCounters()

    # --- what differs between storage modes (edgeopt.engine.prefix_cache_modes) ----------------------

    @abstractmethod
    def preview(self, tokens: list[int], limit: int, namespace: str) -> Lookup:
        """What :meth:`borrow` of the longest cached prefix of ``tokens[:limit]`` would lend and pin."""

    @abstractmethod
    def borrow(self, tokens: list[int], limit: int, slot: int, namespace: str) -> PrefixHit:
        """Give the empty ``slot`` the KV of the longest cached prefix of ``tokens[:limit]`` that ``namespace``
        may read (:meth:`_readable_match`)."""

    @abstractmethod
    def snapshot_cells(self, tokens: int) -> int:
        """New KV cells a :meth:`snapshot` of ``tokens`` positions takes (the scheduler makes room first)."""

    @abstractmethod
    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit, namespace: str) -> PrefixHit | None:
        """Cache the KV of ``tokens``, the first positions of the *running* ``slot`` (which keeps them), in its
        ``namespace``, so that prompts of it arriving meanwhile borrow them (``hit``: what the slot borrowed).
        Returns the slot's hit from now on; None when nothing was cached."""

    @abstractmethod
    def _fill(self, cache_id: int, slot: int, match: Match, end: int) -> None:
        """Give a new entry for positions [0, end) the KV of the finished ``slot`` (released next)."""

    @abstractmethod
    def _recount(self) -> None:
        """Set ``cells`` and ``evictable`` from the tree. A walk of the whole tree, on purpose: it holds at
        most two nodes per cache id, and a walk costs 11 us at serve's default 16 ids and 83 us at 240
        (AMD EPYC), against decode steps of milliseconds; counting at every split, pin and eviction
        instead would spread one invariant over every tree operation."""

    # --- counting lookups --------------------------------------------------------------------------

    def record_query(self, tokens: int) -> None:
        self.counters.queries += 1
        self.counters.query_tokens += tokens

    def record_hit(self, tokens: int) -> None:
        self.counters.hits += 1
        self.counters.hit_tokens += tokens

    # --- borrowing ---------------------------------------------------------------------------------

    def _readable_match(self, tokens: list[int], namespace: str) -> Match:
        """The longest cached prefix of ``tokens`` in ``namespace`` or the operator's. (A prompt that borrows the
        operator's prefix parks in its own namespace, whose entry then tags the same cells again: shared cells
        are charged once per namespace, more than they take, never less.)"""
        own = self._tree.match(tokens, namespace)
        if namespace == OPERATOR_NAMESPACE:
            return own
        operators = self._tree.match(tokens, OPERATOR_NAMESPACE)
        return operators if operators.tokens > own.tokens else own

    def give_back(self, hit: PrefixHit) -> None:
        """The borrowing sequence's slot is being released: unpin what it borrowed."""
        if hit.pinned and hit.node is not None:
            self._tree.pin(hit.node, -1)
            self._recount()

    def _lend_from_tree(self, match: Match, slot: int) -> None:
        """Share the matched prefix's KV from a leaf below it into ``slot``."""
        source = self._tree.leaf_below(match.node)
        assert source.cache_id is not None
        self._storage.share_kv(source.cache_id, slot, 0, match.tokens)
        self._tree.touch(source)

    # --- parking a finished sequence's KV ------------------------------------------------------------

    def park(self, slot: int, tokens: list[int], namespace: str) -> bool:
        """Keep the KV of ``tokens`` (all held by ``slot``) in ``namespace`` after the sequence ends; False when
        there is nothing new to keep or no cache id can be freed. The caller releases the slot afterwards."""
        match = self._tree.match(tokens, namespace)
        if match.tokens == len(tokens):
            return False  # already cached
        if not self._free_id_by_eviction(keep=match.node):
            return False
        match = self._tree.match(tokens, namespace)  # eviction may have reshaped the tree
        self._fill(self._free_ids[-1], slot, match, len(tokens))  # first: if the runtime fails, nothing changed
        node = self._attach(tokens, match)
        self._tree.touch(node)
        self._recount()
        return True

    def _attach(self, tokens: list[int], match: Match) -> Node:
        """Add the leaf for ``tokens`` below where ``match`` ends, holding the next free cache id (filled)."""
        parent = self._tree.split(match.node, match.tokens)
        node = Node(list(tokens[match.tokens:]), parent, len(tokens), cache_id=self._free_ids.pop())
        if parent.cache_id is not None:  # the parent was a leaf: the new leaf's KV covers its path
            self._storage.release(parent.cache_id)
            self._free_ids.append(parent.cache_id)
            parent.cache_id = None
        parent.children[node.tokens[0]] = node
        return node

    # --- entries that outlive the process (server/startup/prompt_state.py) -----------------------------------------

    def adopt(self, tokens: list[int], fill: Callable[[int], bool], namespace: str) -> bool:
        """Insert ``tokens`` as a new entry of ``namespace`` whose KV ``fill(cache_id)`` writes (a saved state, at
        start-up); False when ``fill`` refuses, when its entries already start like ``tokens``, or when no
        cache id can be freed."""
        root = self._tree.root(namespace)
        if not tokens or not self._free_id_by_eviction(keep=root):
            return False
        if self._tree.match(tokens, namespace).tokens > 0:
            return False  # it would share a path with cached cells it does not use: adopt before serving
        cache_id = self._free_ids[-1]
        if not fill(cache_id):
            self._storage.release(cache_id)
            return False
        root.children[tokens[0]] = node = Node(list(tokens), root, len(tokens), cache_id=self._free_ids.pop())
        self._tree.touch(node)
        self._recount()
        return True

    def entry_holding(self, tokens: list[int], namespace: str) -> int | None:
        """The cache id whose KV is exactly ``tokens`` (a leaf of ``namespace`` ending there), if any."""
        match = self._tree.match(tokens, namespace)
        node = match.node
        if match.tokens != len(tokens) or node.end != len(tokens) or node.cache_id is None:
            return None
        return node.cache_id

    def entry_paths(self) -> list[CachedPrefix]:
        """Every entry (a leaf's whole path, and its namespace), most recently used first (a swap saves them)."""
        leaves = sorted(self._tree.leaves(), key=lambda leaf: -leaf.last_used)
        return [CachedPrefix(self._tree.path(leaf), self._tree.namespace_of(leaf)) for leaf in leaves]

    def can_restore(self, tokens: list[int], namespace: str) -> bool:
        """Whether :meth:`restore` would add ``tokens`` without evicting anything: a cache id is free and
        ``namespace`` does not already hold all of them."""
        return bool(tokens) and bool(self._free_ids) and self._tree.match(tokens, namespace).tokens < len(tokens)

    def restore(self, slot: int, tokens: list[int], namespace: str) -> bool:
        """Keep the KV of ``tokens``, loaded from disk into the running ``slot`` no sequence uses, as a
        finished sequence's KV is kept (:meth:`park`: cells shared with cached entries are kept once, so
        entries on one system prompt come back sharing it), ranked less recently used than every entry
        cached. Evicts nothing: False when :meth:`can_restore` says no. The caller releases the slot after."""
        if not self.can_restore(tokens, namespace):
            return False
        match = self._tree.match(tokens, namespace)
        self._fill(self._free_ids[-1], slot, match, len(tokens))  # first: if the runtime fails, nothing changed
        self._tree.rank_below_all(self._attach(tokens, match))
        self._recount()
        return True

    # --- eviction ----------------------------------------------------------------------------------------

    def evict(self, cells: int) -> int:
        """Evict least recently used leaves until ``cells`` cells are freed or nothing is evictable."""
        freed = 0
        while freed < cells:
            leaf = self._tree.lru_leaf()
            if leaf is None:
                break
            freed += self._evict_leaf(leaf)
        return freed

    def clear(self) -> int:
        """Evict every unpinned entry; returns the cells freed."""
        return self.evict(self.cells + 1)

    def entries(self) -> int:
        return len(self._tree.leaves())

    def _free_id_by_eviction(self, keep: Node) -> bool:
        """Evict LRU leaves (never ``keep``) until a cache id is free. One eviction may free none: a leaf
        whose parent has no other child hands its id to the parent."""
        while not self._free_ids:
            leaf = self._tree.lru_leaf(keep)
            if leaf is None:
                return False
            self._evict_leaf(leaf)
        return True

    def _evict_leaf(self, leaf: Node) -> int:
        before = self.cells
        parent = leaf.parent
        assert parent is not None and leaf.cache_id is not None and leaf.refs == 0
        del parent.children[leaf.tokens[0]]
        if parent.parent is not None and not parent.children:
            self._storage.trim(leaf.cache_id, parent.end)  # the parent inherits the trimmed sequence
            parent.cache_id = leaf.cache_id
        else:
            self._storage.release(leaf.cache_id)
            self._free_ids.append(leaf.cache_id)
        self._recount()
        self.evicted_total += before - self.cells
        return before - self.cells
