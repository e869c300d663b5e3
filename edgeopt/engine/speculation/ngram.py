"""Prompt-lookup drafting: guess the next tokens by finding the sequence's latest n-gram earlier in its own
prompt and output, and proposing what followed it there.

Agents paste documents and tool results and the answers quote them, so a continuation seen before is often
the continuation now. The index costs one dict entry per (position, n) of the sequence (no model, no KV),
and is extended incrementally as tokens arrive, so a lookup is O(MAX_NGRAM) dictionary probes.

While an answer copies a passage, the right source is where the previous guess came from, moved on by the
tokens emitted since, not the latest occurrence of the tail: a document repeats its phrases ("the with
statement"), and the latest occurrence of one continues elsewhere. So a lookup first tries to follow the
previous source, and falls back to the index when the tail no longer matches there.
"""

from __future__ import annotations

MAX_NGRAM = 4  # the longest context matched: longer matches are tried first (they predict better)
MIN_NGRAM = 2  # a single repeated token predicts too little to pay for its verification


class NgramIndex:
    """For each n-gram of one token list, the position right after its latest occurrence that has at least
    one token after it (where a continuation can be read)."""

    def __init__(self) -> None:
        self._after: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are in the index
        self._source: tuple[int, int] | None = None  # (position drafted from, len(ids) then): the copy followed
        self._ids: list[int] = []  # draft_sequence's copy of prompt + output, extended as tokens arrive

    def draft_sequence(self, prompt: list[int], output: list[int], max_tokens: int) -> list[int]:
        """:meth:`draft` over ``prompt + output``, a sequence's, without joining them every step (the
        engine looks up every step; a long prompt made the join cost more than the lookup)."""
        if len(self._ids) < len(prompt):  # the first lookup (the prompt never changes afterwards)
            self._ids = list(prompt)
        self._ids.extend(output[len(self._ids) - len(prompt):])
        return self.draft(self._ids, max_tokens)

    def draft(self, ids: list[int], max_tokens: int) -> list[int]:
        """Up to ``max_tokens`` tokens that followed the latest earlier occurrence of ``ids``' longest
        matching tail n-gram; [] when no tail n-gram occurred before."""
        if max_tokens <= 0:
            return []
        self._extend(ids)
        end = len(ids)
        start = self._followed_source(ids)
        for n in range(min(MAX_NGRAM, end - 1), MIN_NGRAM - 1, -1):
            if start is not None:
                break
            start = self._after.get(tuple(ids[end - n:end]))
        if start is None:
            self._source = None
            return []
        self._source = (start, end)
        return ids[start:start + max_tokens]

    def _followed_source(self, ids: list[int]) -> int | None:
        """The previous source moved on by the tokens since, if the sequence's tail still matches there."""
        if self._source is None:
            return None
        start, then = self._source
        candidate = start + len(ids) - then
        if not MIN_NGRAM <= candidate < len(ids) - 1:
            return None
        return candidate if ids[candidate - MIN_NGRAM:candidate] == ids[len(ids) - MIN_NGRAM:] else None

    def _extend(self, ids: list[int]) -> None:
        """Index every n-gram ending at positions up to len(ids) - 1 (each must have a token after it)."""
        last = len(ids) - 1
        if last < self._indexed:  # the list was cut (never happens to a sequence's ids: rebuild to be safe)
            self._after.clear()
            self._indexed = 0
        for end in range(max(self._indexed, MIN_NGRAM), last + 1):
            for n in range(MIN_NGRAM, min(MAX_NGRAM, end) + 1):
                self._after[tuple(ids[end - n:end])] = end
        self._indexed = max(self._indexed, last + 1)
