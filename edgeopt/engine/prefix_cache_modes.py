"""The prefix cache's two storage modes, one class each, and the choice between them (and no cache at all),
made once when the engine builds its scheduler.

* :class:`SharedCellsCache` (llama.cpp's unified cache): a sequence id is a tag on cells, so a path's cells
  are physical once however many leaves and running sequences tag them. Charged cells = the sum of node
  lengths. A running sequence that borrowed a prefix *pins* the nodes it borrowed (they cannot be evicted
  while it runs: it still tags those cells, so evicting them would free nothing).
* :class:`CopiedCellsCache` (ONNX, llama.cpp's per-sequence streams): every leaf holds its own full copy and
  a borrowing sequence copies the prefix into its slot. Charged cells = the sum of leaf depths; nothing is
  pinned. Two moves copy nothing (``move_kv`` renames): a finished sequence's KV *becomes* its entry, and a
  request that continues an entry (a chat's next turn: it matches all of the entry but at most
  ``CONTINUE_MAX_DROPPED`` trailing tokens) *takes* it, when the rest of the tree does not need that leaf
  to reach its own nodes. A turn of a conversation thus copies nothing; a new conversation on a cached
  system prompt copies once.
"""

from __future__ import annotations

from edgeopt.engine.null_prefix_cache import NullPrefixCache
from edgeopt.engine.prefix_cache import PrefixCache, PrefixReuse, PrefixStorage
from edgeopt.engine.prefix_tree import NO_HIT, Lookup, Match, PrefixHit

# A chat's next turn re-renders the previous answer, whose last tokens may come out differently (a stop
# string cut, whitespace the template strips, the end-of-turn marker); a request that leaves more of an
# entry unmatched is another conversation on a shared prefix, whose entry must stay for its own next turn.
CONTINUE_MAX_DROPPED = 16


def prefix_cache_for(storage: PrefixStorage, cache_ids: range, shares_cells: bool, enabled: bool) -> PrefixReuse:
    """The cache an engine runs with: none unless ``enabled`` and the runtime offers ``cache_ids``; else the
    mode the runtime stores KV in (``RuntimeInfo.shares_kv_cells``)."""
    if not enabled or len(cache_ids) == 0:
        return NullPrefixCache()
    return SharedCellsCache(storage, cache_ids) if shares_cells else CopiedCellsCache(storage, cache_ids)


class SharedCellsCache(PrefixCache):
    def preview(self, tokens: list[int], limit: int, namespace: str) -> Lookup:
        match = self._readable_match(tokens[:limit], namespace)
        return Lookup(match.tokens, True, match.unpinned)

    def borrow(self, tokens: list[int], limit: int, slot: int, namespace: str) -> PrefixHit:
        match = self._readable_match(tokens[:limit], namespace)
        if match.tokens == 0:
            return NO_HIT
        self._lend_from_tree(match, slot)
        self._tree.pin(match.node, +1)
        self._recount()
        return PrefixHit(match.tokens, match.node, True)

    def snapshot_cells(self, tokens: int) -> int:
        return 0  # the entry tags the slot's own cells

    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit, namespace: str) -> PrefixHit | None:
        """The running sequence becomes a borrower of the new entry like any other; its new hit is returned
        (the caller stops charging the slot for those cells). Only done when ``namespace`` holds no more of
        ``tokens`` than the slot borrowed from it: beyond that the slot's cells are its own computation of
        tokens the tree also holds, and the entry would hold neither copy whole. (A slot that borrowed the
        operator's prefix unpins it there and pins the new entry here, as any borrower would.)"""
        match = self._tree.match(tokens, namespace)
        if match.tokens == len(tokens) or match.tokens != hit.tokens:
            return None
        if not self._free_id_by_eviction(keep=match.node):
            return None
        match = self._tree.match(tokens, namespace)  # eviction may have reshaped the tree (not the slot's pinned path)
        self._fill(self._free_ids[-1], slot, match, len(tokens))
        node = self._attach(tokens, match)
        self._tree.touch(node)
        self._tree.pin(node, +1)
        self._tree.pin(hit.node, -1)
        self._recount()
        return PrefixHit(len(tokens), node, True)

    def _fill(self, cache_id: int, slot: int, match: Match, end: int) -> None:
        """The matched part from the tree's own cells, only the rest from the slot, so tokens the slot
        computed again (another request cached them meanwhile) are not kept twice: they are freed with the
        slot. KV depends only on the tokens and positions, so either copy of them serves."""
        if match.tokens > 0:
            source = self._tree.leaf_below(match.node).cache_id
            assert source is not None
            self._storage.share_kv(source, cache_id, 0, match.tokens)
            self._storage.share_kv(slot, cache_id, match.tokens, end)
        else:
            self._storage.share_kv(slot, cache_id, 0, end)

    def _recount(self) -> None:
        nodes = self._tree.nodes()
        self.cells = sum(len(node.tokens) for node in nodes)
        self.evictable = sum(len(node.tokens) for node in nodes if node.refs == 0)


class CopiedCellsCache(PrefixCache):
    def preview(self, tokens: list[int], limit: int, namespace: str) -> Lookup:
        match = self._readable_match(tokens[:limit], namespace)
        if self._continues(match, namespace):
            # The entry's cells leave the cache: the lent ones serve the sequence, the rest are freed.
            return Lookup(match.tokens, True, match.tokens)
        return Lookup(match.tokens, False, 0)

    def borrow(self, tokens: list[int], limit: int, slot: int, namespace: str) -> PrefixHit:
        match = self._readable_match(tokens[:limit], namespace)
        if match.tokens == 0:
            return NO_HIT
        if self._continues(match, namespace):
            return self._take(match, slot)
        self._lend_from_tree(match, slot)
        self._recount()
        return PrefixHit(match.tokens, match.node, False)

    def _continues(self, match: Match, namespace: str) -> bool:
        """The match ends inside a leaf of ``namespace`` (the operator's entries stay for every namespace), at
        most CONTINUE_MAX_DROPPED tokens before its end, and the leaf's parent keeps a route to its cells
        without it (the root, or another child)."""
        leaf, parent = match.node, match.node.parent
        return (match.tokens > 0 and leaf.cache_id is not None and leaf.end - match.tokens <= CONTINUE_MAX_DROPPED
                and parent is not None and (parent.parent is None or len(parent.children) > 1)
                and self._tree.namespace_of(leaf) == namespace)

    def _take(self, match: Match, slot: int) -> PrefixHit:
        """Hand the leaf where ``match`` ends over to ``slot`` (renamed, not copied), cut to the match."""
        leaf = match.node
        assert leaf.cache_id is not None and leaf.parent is not None
        self._storage.move_kv(leaf.cache_id, slot)
        if match.tokens < leaf.end:
            self._storage.trim(slot, match.tokens)
        del leaf.parent.children[leaf.tokens[0]]
        self._free_ids.append(leaf.cache_id)
        self._tree.touch(leaf.parent)
        self._recount()
        return PrefixHit(match.tokens, None, False)

    def snapshot_cells(self, tokens: int) -> int:
        return tokens  # the entry is a copy of the slot's positions

    def snapshot(self, slot: int, tokens: list[int], hit: PrefixHit, namespace: str) -> PrefixHit | None:
        """The entry is a copy of the slot's positions; the slot's ``hit`` is returned unchanged."""
        match = self._tree.match(tokens, namespace)
        if match.tokens == len(tokens):
            return None
        if not self._free_id_by_eviction(keep=match.node):
            return None
        match = self._tree.match(tokens, namespace)  # eviction may have reshaped the tree
        self._storage.share_kv(slot, self._free_ids[-1], 0, len(tokens))
        self._tree.touch(self._attach(tokens, match))
        self._recount()
        return hit

    def _fill(self, cache_id: int, slot: int, match: Match, end: int) -> None:
        """The slot's KV whole, renamed (the slot is released next)."""
        self._storage.move_kv(slot, cache_id)

    def _recount(self) -> None:
        self.cells = sum(node.end for node in self._tree.nodes() if node.cache_id is not None)
        self.evictable = self.cells  # nothing is pinned
