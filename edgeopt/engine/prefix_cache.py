"""Automatic prefix caching: KV of finished requests kept in a radix tree of token ids, reused by later prompts.

Structure: a radix tree (as SGLang's RadixAttention), not vLLM's chained hashes of fixed-size blocks.
vLLM hashes blocks because its KV *is* paged in blocks; llama.cpp's KV is per token and
``llama_memory_seq_cp`` shares any range of positions, so a token-granular tree costs nothing more and
reuses up to a block's worth more per match (a chat turn's prompt rarely ends on a block boundary).
The tree is small (a node per divergence point, at most one leaf per cache id), so walking it is cheap.

Storage: each *leaf* owns one runtime sequence id from ``cache_ids`` whose KV is the leaf's whole path
from the root; an inner node's KV is reached through any leaf below it. Two ways a runtime may store it:

* ``shares_cells`` (llama.cpp's unified cache): a sequence id is a tag on cells, so a path's cells are
  physical once however many leaves and running sequences tag them. Charged cells = the sum of node
  lengths. A running sequence that borrowed a prefix *pins* the nodes it borrowed (they cannot be
  evicted while it runs: it still tags those cells, so evicting them would free nothing).
* copies (ONNX, llama.cpp's per-sequence streams): every leaf holds its own full copy and a borrowing
  sequence copies the prefix into its slot. Charged cells = the sum of leaf depths; nothing is pinned.
  Two moves copy nothing (``move_kv`` renames): a finished sequence's KV *becomes* its entry, and a
  request that continues an entry (a chat's next turn: it matches all of the entry but at most
  ``CONTINUE_MAX_DROPPED`` trailing tokens) *takes* it, when the rest of the tree does not need that
  leaf to reach its own nodes. A turn of a conversation thus copies nothing; a new conversation on a
  cached system prompt copies once.

Eviction removes the least recently used unpinned leaf; its parent inherits the leaf's sequence id
(trimmed) when it has no other child, so every leaf keeps its KV and every inner node stays reachable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# A chat's next turn re-renders the previous answer, whose last tokens may come out differently (a stop
# string cut, whitespace the template strips, the end-of-turn marker); a request that leaves more of an
# entry unmatched is another conversation on a shared prefix, whose entry must stay for its own next turn.
CONTINUE_MAX_DROPPED = 16


class PrefixStorage(Protocol):
    """The runtime operations the cache drives (a subset of :class:`runtimes.base.Runtime`)."""

    def share_kv(self, source: int, target: int, start: int, end: int) -> None: ...

    def move_kv(self, source: int, target: int) -> None: ...

    def trim(self, slot: int, tokens: int) -> None: ...

    def release(self, slot: int) -> None: ...


@dataclass(eq=False)
class _Node:
    tokens: list[int]
    parent: _Node | None
    end: int  # tokens from the root through this node
    children: dict[int, _Node] = field(default_factory=dict)  # keyed by each child's first token
    refs: int = 0  # running sequences whose borrowed prefix runs through this node
    cache_id: int | None = None  # leaves only: the sequence id holding the whole path
    last_used: int = 0

    @property
    def start(self) -> int:
        return self.end - len(self.tokens)

    def is_leaf(self) -> bool:
        return not self.children and self.parent is not None


@dataclass(frozen=True)
class PrefixHit:
    """What a sequence borrowed from the cache: ``tokens`` positions, pinned through ``node``."""

    tokens: int
    node: _Node | None  # deepest node the borrowed prefix touches (None: nothing borrowed)
    pinned: bool


NO_HIT = PrefixHit(0, None, False)


@dataclass(frozen=True)
class Lookup:
    """What borrowing would do, for admission control (looking touches nothing)."""

    lent: int  # positions the sequence would not compute
    from_cache: bool  # the lent cells are the cache's own (shared, or an entry handed over), not new copies
    pinned: int  # evictable cells borrowing would take out of eviction's reach


@dataclass(frozen=True)
class _Match:
    tokens: int
    node: _Node  # node where the match ends (the root when nothing matched)
    unpinned: int  # cells of unpinned nodes on the path (they stop being evictable once pinned)


class PrefixCache:
    def __init__(self, storage: PrefixStorage, cache_ids: range, shares_cells: bool) -> None:
        assert len(cache_ids) > 0, cache_ids
        self._storage = storage
        self.shares_cells = shares_cells
        self._free_ids = sorted(cache_ids, reverse=True)
        self._root = _Node([], None, 0)
        self._clock = 0
        self.cells = 0  # KV cells the cache is charged for (see the module docstring)
        self.evictable = 0  # of those, cells eviction could free now
        self.evicted_total = 0  # cells evicted since start (clear() included)

    # --- borrowing ---------------------------------------------------------------------------------

    def preview(self, tokens: list[int], limit: int) -> Lookup:
        """What :meth:`borrow` of the longest cached prefix of ``tokens[:limit]`` would lend and pin."""
        match = self._match(tokens[:limit])
        if self.shares_cells:
            return Lookup(match.tokens, True, match.unpinned)
        if self._continues(match):
            # The entry's cells leave the cache: the lent ones serve the sequence, the rest are freed.
            return Lookup(match.tokens, True, match.tokens)
        return Lookup(match.tokens, False, 0)

    def borrow(self, tokens: list[int], limit: int, slot: int) -> PrefixHit:
        """Give the empty ``slot`` the KV of the longest cached prefix of ``tokens[:limit]``."""
        match = self._match(tokens[:limit])
        if match.tokens == 0:
            return NO_HIT
        if not self.shares_cells and self._continues(match):
            return self._take(match, slot)
        source = self._leaf_below(match.node)
        assert source.cache_id is not None
        self._storage.share_kv(source.cache_id, slot, 0, match.tokens)
        self._touch(source)
        if self.shares_cells:
            self._pin(match.node, +1)
        self._recount()
        return PrefixHit(match.tokens, match.node, self.shares_cells)

    def _continues(self, match: _Match) -> bool:
        """The match ends inside a leaf, at most CONTINUE_MAX_DROPPED tokens before its end, and the leaf's
        parent keeps a route to its cells without it (the root, or another child)."""
        leaf, parent = match.node, match.node.parent
        return (match.tokens > 0 and leaf.cache_id is not None and leaf.end - match.tokens <= CONTINUE_MAX_DROPPED
                and parent is not None and (parent is self._root or len(parent.children) > 1))

    def _take(self, match: _Match, slot: int) -> PrefixHit:
        """Hand the leaf where ``match`` ends over to ``slot`` (renamed, not copied), cut to the match."""
        leaf = match.node
        assert leaf.cache_id is not None and leaf.parent is not None
        self._storage.move_kv(leaf.cache_id, slot)
        if match.tokens < leaf.end:
            self._storage.trim(slot, match.tokens)
        del leaf.parent.children[leaf.tokens[0]]
        self._free_ids.append(leaf.cache_id)
        self._touch(leaf.parent)
        self._recount()
        return PrefixHit(match.tokens, None, False)

    def give_back(self, hit: PrefixHit) -> None:
        """The borrowing sequence's slot is being released: unpin what it borrowed."""
        if hit.pinned and hit.node is not None:
            self._pin(hit.node, -1)
            self._recount()

    # --- parking a finished sequence's KV ------------------------------------------------------------

    def park(self, slot: int, tokens: list[int]) -> bool:
        """Keep the KV of ``tokens`` (all held by ``slot``) after the sequence ends; False when there is
        nothing new to keep or no cache id can be freed. The caller releases the slot afterwards."""
        match = self._match(tokens)
        if match.tokens == len(tokens):
            return False  # already cached
        if not self._free_id_by_eviction(keep=match.node):
            return False
        match = self._match(tokens)  # eviction may have reshaped the tree
        self._fill(self._free_ids[-1], slot, match, len(tokens))  # first: if the runtime fails, nothing changed
        node = self._attach(tokens, match)
        self._touch(node)
        self._recount()
        return True

    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit) -> PrefixHit | None:
        """Cache the KV of ``tokens``, the first positions of the *running* ``slot`` (which keeps them), so
        that prompts arriving while it runs borrow them (``hit``: what the slot borrowed when admitted).

        Shared cells: the running sequence becomes a borrower of the new entry like any other; its new hit
        is returned (the caller stops charging the slot for those cells). Only done when the tree holds no
        more of ``tokens`` than the slot borrowed from it: beyond that the slot's cells are its own
        computation of tokens the tree also holds, and the entry would hold neither copy whole.
        Copies: the entry is a copy of the slot's positions and ``hit`` is returned unchanged.
        None when nothing was cached (nothing new, the condition above, or no cache id can be freed)."""
        match = self._match(tokens)
        if match.tokens == len(tokens) or (self.shares_cells and match.tokens != hit.tokens):
            return None
        if not self._free_id_by_eviction(keep=match.node):
            return None
        match = self._match(tokens)  # eviction may have reshaped the tree (never the pinned path the slot borrowed)
        cache_id = self._free_ids[-1]
        if self.shares_cells:
            self._fill(cache_id, slot, match, len(tokens))
        else:
            self._storage.share_kv(slot, cache_id, 0, len(tokens))
        node = self._attach(tokens, match)
        self._touch(node)
        if self.shares_cells:
            self._pin(node, +1)
            self._pin(hit.node, -1)
            hit = PrefixHit(len(tokens), node, True)
        self._recount()
        return hit

    def _attach(self, tokens: list[int], match: _Match) -> _Node:
        """Add the leaf for ``tokens`` below where ``match`` ends, holding the next free cache id (filled)."""
        parent = self._split(match.node, match.tokens)
        node = _Node(list(tokens[match.tokens:]), parent, len(tokens), cache_id=self._free_ids.pop())
        if parent.cache_id is not None:  # the parent was a leaf: the new leaf's KV covers its path
            self._storage.release(parent.cache_id)
            self._free_ids.append(parent.cache_id)
            parent.cache_id = None
        parent.children[node.tokens[0]] = node
        return node

    def _fill(self, cache_id: int, slot: int, match: _Match, end: int) -> None:
        """Give the new entry its KV. Shared cells: the matched part from the tree's own cells, only the
        rest from the slot, so tokens the slot computed again (another request cached them meanwhile)
        are not kept twice: they are freed with the slot. KV depends only on the tokens and positions,
        so either copy of them serves. Copies: the slot's KV whole, renamed (the slot is released next)."""
        if not self.shares_cells:
            self._storage.move_kv(slot, cache_id)
        elif match.tokens > 0:
            source = self._leaf_below(match.node).cache_id
            assert source is not None
            self._storage.share_kv(source, cache_id, 0, match.tokens)
            self._storage.share_kv(slot, cache_id, match.tokens, end)
        else:
            self._storage.share_kv(slot, cache_id, 0, end)

    # --- entries that outlive the process (prompt_state.py) ------------------------------------------------

    def adopt(self, tokens: list[int], fill: Callable[[int], bool]) -> bool:
        """Insert ``tokens`` as a new entry whose KV ``fill(cache_id)`` writes (a saved state, at start-up);
        False when ``fill`` refuses, when cached entries already start like ``tokens``, or when no cache
        id can be freed."""
        if not tokens or not self._free_id_by_eviction(keep=self._root):
            return False
        if self._match(tokens).tokens > 0:
            return False  # it would share a path with cached cells it does not use: adopt before serving
        cache_id = self._free_ids[-1]
        if not fill(cache_id):
            self._storage.release(cache_id)
            return False
        self._root.children[tokens[0]] = node = _Node(list(tokens), self._root, len(tokens),
                                                      cache_id=self._free_ids.pop())
        self._touch(node)
        self._recount()
        return True

    def entry_holding(self, tokens: list[int]) -> int | None:
        """The cache id whose KV is exactly ``tokens`` (a leaf ending there), if any."""
        match = self._match(tokens)
        node = match.node
        if match.tokens != len(tokens) or node.end != len(tokens) or node.cache_id is None:
            return None
        return node.cache_id

    # --- eviction ----------------------------------------------------------------------------------------

    def evict(self, cells: int) -> int:
        """Evict least recently used leaves until ``cells`` cells are freed or nothing is evictable."""
        freed = 0
        while freed < cells:
            leaf = self._lru_leaf()
            if leaf is None:
                break
            freed += self._evict_leaf(leaf)
        return freed

    def clear(self) -> int:
        """Evict every unpinned entry; returns the cells freed."""
        return self.evict(self.cells + 1)

    def entries(self) -> int:
        return self._count_leaves(self._root)

    # --- internals -----------------------------------------------------------------------------------------

    def _match(self, tokens: list[int]) -> _Match:
        node, matched, unpinned = self._root, 0, 0
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            common = common_prefix_length(child.tokens, tokens[matched:])
            node, matched = child, matched + common
            unpinned += len(child.tokens) if child.refs == 0 else 0
            if common < len(child.tokens):
                break
        return _Match(matched, node, unpinned)

    def _leaf_below(self, node: _Node) -> _Node:
        while node.cache_id is None:
            node = next(iter(node.children.values()))
        return node

    def _split(self, node: _Node, at: int) -> _Node:
        """Make a node end exactly at depth ``at`` (splitting ``node`` if ``at`` falls inside it)."""
        if at == node.end:
            return node
        cut = at - node.start
        upper = _Node(node.tokens[:cut], node.parent, at, refs=node.refs, last_used=node.last_used)
        assert node.parent is not None
        node.parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[cut:]
        node.parent = upper
        upper.children[node.tokens[0]] = node
        return upper

    def _pin(self, node: _Node | None, delta: int) -> None:
        while node is not None and node.parent is not None:
            node.refs += delta
            assert node.refs >= 0, node
            node = node.parent

    def _touch(self, node: _Node | None) -> None:
        self._clock += 1
        while node is not None:
            node.last_used = self._clock
            node = node.parent

    def _leaves(self, node: _Node) -> list[_Node]:
        if node.is_leaf():
            return [node]
        return [leaf for child in node.children.values() for leaf in self._leaves(child)]

    def _count_leaves(self, node: _Node) -> int:
        return len(self._leaves(node)) if node.children else 0

    def _lru_leaf(self, keep: _Node | None = None) -> _Node | None:
        candidates = [leaf for leaf in (self._leaves(self._root) if self._root.children else [])
                      if leaf.refs == 0 and leaf is not keep]
        return min(candidates, key=lambda leaf: leaf.last_used, default=None)

    def _free_id_by_eviction(self, keep: _Node) -> bool:
        """Evict LRU leaves (never ``keep``) until a cache id is free. One eviction may free none: a leaf
        whose parent has no other child hands its id to the parent."""
        while not self._free_ids:
            leaf = self._lru_leaf(keep)
            if leaf is None:
                return False
            self._evict_leaf(leaf)
        return True

    def _evict_leaf(self, leaf: _Node) -> int:
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

    def _recount(self) -> None:
        cells = evictable = 0
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if self.shares_cells:
                cells += len(node.tokens)
                evictable += len(node.tokens) if node.refs == 0 else 0
            elif node.cache_id is not None:
                cells += node.end
        self.cells = cells
        self.evictable = evictable if self.shares_cells else cells


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists. Slices compare in C: a bisection over them beats a
    Python loop over thousands of tokens, which the scheduler runs for every waiting prompt each step."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low
