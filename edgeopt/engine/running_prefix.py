"""A burst of conversations on one system prompt: a waiting prompt that shares a long prefix with a running
sequence's prompt waits until that sequence has computed it, then borrows it through the prefix cache, instead
of computing it again (llama-server's slots each compute such a prompt in full). The scheduler asks this of
each waiting sequence it could admit. Only a running sequence of the same cache namespace (tenant) counts: another
tenant's prompt is neither borrowed nor waited for, so the wait cannot tell one tenant what another sent."""

from __future__ import annotations

from edgeopt.engine.kv_cells import KvCells
from edgeopt.engine.prefix_tree import common_prefix_length
from edgeopt.engine.sequence import Sequence

# A waiting prompt shares a running sequence's prefix when it has at least this many tokens in common with
# it beyond what the cache holds: fewer are cheaper to compute than a cache entry (on copying runtimes a
# copy of the whole stream) and a wait for them.
MIN_SHARED_TOKENS = 32


def waits_for_running_prefix(seq: Sequence, running: list[Sequence], cells: KvCells) -> bool:
    """Share the prefix ``seq`` has in common with a ``running`` sequence, beyond what the cache holds: True
    while that sequence is still computing it (``seq`` waits rather than compute it again), else the computed
    prefix goes into the cache, where ``seq`` borrows it when admitted."""
    cache = cells.cache
    if not cache.shares_running_prefixes or seq.wants_position_logits:
        return False
    limit = seq.num_tokens - 1  # the last token is always fed
    cached = cache.preview(seq.all_ids, limit, seq.cache_namespace).lent
    owner, shared = None, cached + MIN_SHARED_TOKENS - 1
    for other in (s for s in running if s.cache_namespace == seq.cache_namespace):
        common = min(common_prefix_length(seq.prompt_ids, other.prompt_ids), limit)
        if common > shared or (common == shared and owner is not None and other.num_computed > owner.num_computed):
            owner, shared = other, common
    if owner is None:
        return False
    if owner.num_computed < shared:
        return True
    cells.cache_running_prefix(owner, shared)
    return False
