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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgeopt.errors import RequestError, UnknownResponseError
from edgeopt.server.chat.request import Message
from edgeopt.server.state import DEFAULT_STORE_BYTES, ServerState
from edgeopt.server.http.text_fields import quoted


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object as returned
    conversation: tuple[Message, ...]  # chat messages, instructions excluded, this response's output included
    size: int
    owner: str | None = None  # the caller whose key made it (edgeopt.server.http.callers; None: a keyless server)


class ResponseStore:
    def __init__(self, budget_bytes: int = DEFAULT_STORE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self.evicted_total = 0
        self._lock = threading.Lock()  # /metrics scrapes from another thread

    def put(self, response_id: str, response: dict[str, Any], conversation: tuple[Message, ...],
            owner: str | None = None) -> bool:
        """Keep it (evicting the least recently used); False when it alone exceeds the budget."""
        turns = [message.template_dict() for message in conversation]
        size = len(json.dumps([response, turns], ensure_ascii=False).encode())
        if size > self.budget_bytes:
            return False
        with self._lock:
            old = self._entries.pop(response_id, None)
            if old is not None:
                self._bytes -= old.size
            self._entries[response_id] = StoredResponse(response, conversation, size, owner)
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


def start_store(state: ServerState) -> None:
    """The face's start: one store per server, sized by --responses-store, reported in /metrics."""
    store = ResponseStore(state.settings.responses_store_bytes)
    state.face_state[_KEY] = store
    state.metrics.add_collector(StoreCollector(store))


def conversation_before(state: ServerState, previous_response_id: str | None, owner: str | None,
                        model: str) -> tuple[ResponseStore, tuple[Message, ...]]:
    """The server's store, and the conversation ``previous_response_id`` continues (() without one). A stored
    chain belongs to the model that made it: continuing it with another ``model`` is refused naming both."""
    store = store_of(state)
    if previous_response_id is None:
        return store, ()
    entry = stored(store, previous_response_id, owner, param="previous_response_id")
    made_by = str(entry.response.get("model") or "")
    if made_by and made_by != model and made_by not in state.models.catalog.resolve(model).names:
        raise RequestError(f"previous_response_id {quoted(previous_response_id)} was made by model {made_by!r}, "
                           f"not {model!r}", f"send model={made_by!r} to continue it, or send the whole conversation "
                           "as input to another model", param="previous_response_id")
    return store, entry.conversation


def stored(store: ResponseStore, response_id: str, owner: str | None, param: str | None = None) -> StoredResponse:
    """The stored response, if ``owner`` made it. Another caller's id is the same 404 as an unknown one: it
    must not learn that the id exists."""
    entry = store.get(response_id)
    if entry is None or entry.owner != owner:
        raise UnknownResponseError(f"no stored response has the id {quoted(response_id)} (never stored: store was "
                                   "false, or another server made it; or evicted: the store keeps the most "
                                   f"recently used responses within {store.budget_bytes} bytes)",
                                   "send the whole conversation as input instead, or raise the server's "
                                   "--responses-store", param=param)
    return entry


def store_of(state: ServerState) -> ResponseStore:
    store = state.face_state[_KEY]
    assert isinstance(store, ResponseStore), "start_store ran when the server started"
    return store


_KEY = "responses.store"


class StoreCollector(Collector):
    def __init__(self, store: ResponseStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        store = self._store
        for name, doc, value in (
                ("edgeopt_responses_stored", "Responses kept for previous_response_id and GET.", len(store)),
                ("edgeopt_responses_store_bytes", "Bytes (JSON) of the stored responses.", store.bytes),
                ("edgeopt_responses_store_budget_bytes", "Bytes the stored responses may take.", store.budget_bytes)):
            yield GaugeMetricFamily(name, doc, value=float(value))
        evicted = CounterMetricFamily("edgeopt_responses_store_evicted", "Stored responses evicted to stay in budget.")
        evicted.add_metric([], float(store.evicted_total))
        yield evicted
