"""The prefix cache's radix tree of token ids and the small values its users hand around.

Structure: a radix tree (as SGLang's RadixAttention), not vLLM's chained hashes of fixed-size blocks.
vLLM hashes blocks because its KV *is* paged in blocks; llama.cpp's KV is per token and
``llama_memory_seq_cp`` shares any range of positions, so a token-granular tree costs nothing more and
reuses up to a block's worth more per match (a chat turn's prompt rarely ends on a block boundary).
The tree is small (a node per divergence point, at most one leaf per cache id), so walking it is cheap.

Tenants: the tree has one root per cache namespace (a tenant of a server with API keys: edgeopt.server.http.
callers), so a prompt only ever matches what its own namespace cached, as vLLM's ``cache_salt`` keeps one
tenant's blocks from another's. The same tokens in two namespaces are two paths, two entries and two KVs.

Only the tree's shape lives here; what a node's KV costs and how it is lent depends on how the runtime
stores cached KV (:mod:`edgeopt.engine.prefix_cache_modes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The namespace of a server without keys (every request), and of the operator's own entries (serve --warm).
# No caller is named "" (edgeopt.server.http.callers refuses it), so no tenant's namespace is this one.
SHARED_NAMESPACE = ""
# The operator's entries on a server with keys (serve --warm's system prompt, chosen by the operator, not sent
# by a tenant): every namespace reads them, and only the operator writes them.
OPERATOR_NAMESPACE = "operator"


@dataclass(frozen=True)
class CachedPrefix:
    """One cache entry as it leaves the engine (a swapped-out model saves each): its tokens, and whose."""

    tokens: list[int]
    namespace: str = SHARED_NAMESPACE


@dataclass(eq=False)
class Node:
    tokens: list[int]
    parent: Node | None
    end: int  # tokens from the root through this node
    children: dict[int, Node] = field(default_factory=dict)  # keyed by each child's first token
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
    node: Node | None  # deepest node the borrowed prefix touches (None: nothing borrowed)
    pinned: bool


NO_HIT = PrefixHit(0, None, False)


@dataclass(frozen=True)
class Lookup:
    """What borrowing would do, for admission control (looking touches nothing)."""

    lent: int  # positions the sequence would not compute
    from_cache: bool  # the lent cells are the cache's own (shared, or an entry handed over), not new copies
    pinned: int  # evictable cells borrowing would take out of eviction's reach


NO_LOOKUP = Lookup(0, False, 0)


@dataclass(frozen=True)
class Match:
    tokens: int
    node: Node  # node where the match ends (the root when nothing matched)
    unpinned: int  # cells of unpinned nodes on the path (they stop being evictable once pinned)


class RadixTree:
    """Token paths from one root per namespace; leaves carry the cache id whose KV is their whole path."""

    def __init__(self) -> None:
        # Made on a namespace's first lookup and kept: there are as many as the server has keys, plus one.
        self._roots: dict[str, Node] = {}
        self._clock = 0
        self._floor = 0  # below every touch: entries restored from disk rank older than those already used

    def root(self, namespace: str) -> Node:
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = Node([], None, 0)
        return root

    def namespace_of(self, node: Node) -> str:
        while node.parent is not None:
            node = node.parent
        return next(name for name, root in self._roots.items() if root is node)

    def match(self, tokens: list[int], namespace: str) -> Match:
        node, matched, unpinned = self.root(namespace), 0, 0
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            common = common_prefix_length(child.tokens, tokens[matched:])
            node, matched = child, matched + common
            unpinned += len(child.tokens) if child.refs == 0 else 0
            if common < len(child.tokens):
                break
        return Match(matched, node, unpinned)

    @staticmethod
    def leaf_below(node: Node) -> Node:
        while node.cache_id is None:
            node = next(iter(node.children.values()))
        return node

    @staticmethod
    def split(node: Node, at: int) -> Node:
        """Make a node end exactly at depth ``at`` (splitting ``node`` if ``at`` falls inside it)."""
        if at == node.end:
            return node
        cut = at - node.start
        upper = Node(node.tokens[:cut], node.parent, at, refs=node.refs, last_used=node.last_used)
        assert node.parent is not None
        node.parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[cut:]
        node.parent = upper
        upper.children[node.tokens[0]] = node
        return upper

    @staticmethod
    def pin(node: Node | None, delta: int) -> None:
        while node is not None and node.parent is not None:
            node.refs += delta
            assert node.refs >= 0, node
            node = node.parent

    def touch(self, node: Node | None) -> None:
        self._clock += 1
        while node is not None:
            node.last_used = self._clock
            node = node.parent

    def rank_below_all(self, node: Node) -> None:
        """Make the leaf ``node`` less recently used than every node, and than the leaves ranked so before it
        (a swapped-out model's entries come back most recently used first, each older than the last)."""
        self._floor -= 1
        node.last_used = self._floor

    @staticmethod
    def path(node: Node) -> list[int]:
        """The tokens from the root through ``node``."""
        parts = []
        while node.parent is not None:
            parts.append(node.tokens)
            node = node.parent
        return [token for part in reversed(parts) for token in part]

    def leaves(self, node: Node | None = None) -> list[Node]:
        """The leaves below ``node``; every namespace's when None."""
        if node is None:
            return [leaf for root in self._roots.values() for leaf in self.leaves(root)]
        if node.is_leaf():
            return [node]
        return [leaf for child in node.children.values() for leaf in self.leaves(child)]

    def nodes(self) -> list[Node]:
        """Every node but the roots."""
        found, stack = [], [child for root in self._roots.values() for child in root.children.values()]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            found.append(node)
        return found

    def lru_leaf(self, keep: Node | None = None) -> Node | None:
        candidates = [leaf for leaf in self.leaves() if leaf.refs == 0 and leaf is not keep]
        return min(candidates, key=lambda leaf: leaf.last_used, default=None)


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
