"""Responses kept for ``previous_response_id`` and ``GET /v1/responses/{id}``: in memory, bounded by bytes.

Each entry holds the response object (what GET returns) and the whole conversation it ended, as chat
messages without the instructions (OpenAI does not carry ``instructions`` over to the next turn): a
follow-up sends only its new input and is rendered as the full conversation, so its prompt starts with
the previous turn's prompt and answer, which the prefix cache still holds. Entries are evicted least
recently used first once their bytes (JSON size) pass the budget; an evicted id is then unknown, and the
route says so by name. Every entry carries its whole history, so evicting one never breaks another.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_STORE_BYTES = 32 * 1024 * 1024  # edgeopt serve --responses-store (its default: 32MiB)


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object as returned
    conversation: list[dict[str, Any]]  # chat messages, instructions excluded, this response's output included
    size: int


class ResponseStore:
    def __init__(self, budget_bytes: int = DEFAULT_STORE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self.evicted_total = 0
        self._lock = threading.Lock()  # /metrics scrapes from another thread

    def put(self, response_id: str, response: dict[str, Any], conversation: list[dict[str, Any]]) -> bool:
        """Keep it (evicting the least recently used); False when it alone exceeds the budget."""
        size = len(json.dumps([response, conversation], ensure_ascii=False).encode())
        if size > self.budget_bytes:
            return False
        with self._lock:
            old = self._entries.pop(response_id, None)
            if old is not None:
                self._bytes -= old.size
            self._entries[response_id] = StoredResponse(response, conversation, size)
            self._bytes += size
            while self._bytes > self.budget_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size
                self.evicted_total += 1
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)
            return entry

    def delete(self, response_id: str) -> bool:
        with self._lock:
            entry = self._entries.pop(response_id, None)
            if entry is not None:
                self._bytes -= entry.size
            return entry is not None

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
