"""The requests an engine has accepted and not yet ended, and the one way each of them ends.

Both engines keep their in-flight requests here: edgeopt's :class:`~edgeopt.engine.engine.Engine`, and the
engine a runtime brings with its own scheduler (``edgeopt.paged_batching.paged_engine``). The registry opens a
request (its :class:`RequestStream` on the caller's event loop and its :class:`RequestTracker`), turns
each new token into a text delta, and ends the request exactly once with a final output. Outputs are
collected during a step and reach each event loop in one callback when the engine calls :meth:`flush`.

Threads: :meth:`open` runs on the caller's thread, the rest on the engine's; the lock guards only the
id -> tracker map and is never held while a model runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from edgeopt.engine.api import ActiveRequest, RequestOutput, SamplingParams, TokenLogprob
from edgeopt.engine.outputs import RequestTracker
from edgeopt.engine.prefix_tree import SHARED_NAMESPACE
from edgeopt.engine.sequence import Sequence
from edgeopt.engine.stream import OutputDispatcher, RequestStream
from edgeopt.errors import RequestError
from edgeopt.runtimes.base import Tokenizer


class RequestRegistry:
    def __init__(self, tokenizer: Tokenizer, eos_token_ids: frozenset[int], stream_interval_s: float = 0.0) -> None:
        self._tokenizer = tokenizer
        self._eos_token_ids = eos_token_ids
        self._lock = threading.Lock()
        self._trackers: dict[str, RequestTracker] = {}
        self._dispatcher = OutputDispatcher(stream_interval_s)
        self._coalesce = stream_interval_s > 0
        self.generated_tokens_total = 0

    def open(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
             on_close: Callable[[str], None], cache_namespace: str = SHARED_NAMESPACE) -> RequestTracker:
        """Register a new request; its stream lives on the running event loop and calls ``on_close`` (the
        engine's abort) when its consumer leaves early. A request id already in flight is refused."""
        loop = asyncio.get_running_loop()  # raises RuntimeError off an event loop: a caller bug
        stream = RequestStream(request_id, loop, on_close=on_close, coalesce=self._coalesce)
        seq = Sequence(request_id, prompt_ids, params, cache_namespace=cache_namespace)
        tracker = RequestTracker(seq, stream, self._tokenizer, self._eos_token_ids)
        with self._lock:
            if request_id in self._trackers:
                raise RequestError(f"request id {request_id!r} is already in flight", "use a unique id",
                                   param="request_id")
            self._trackers[request_id] = tracker
        return tracker

    def get(self, request_id: str) -> RequestTracker | None:
        with self._lock:
            return self._trackers.get(request_id)

    def trackers(self) -> list[RequestTracker]:
        """The open requests now (a copy: ending them while iterating is safe)."""
        with self._lock:
            return list(self._trackers.values())

    def __len__(self) -> int:
        return len(self._trackers)

    def add_token(self, tracker: RequestTracker, token: int, context_tokens: int,
                  logprob: TokenLogprob | None = None) -> RequestOutput:
        """The request produced ``token`` (with its ``logprob`` when asked): append it and return its text
        delta, final when a stop condition, a complete grammar, the length or the context ends the request.
        The caller frees what its engine holds, then emits it."""
        tracker.seq.output_ids.append(token)
        self.generated_tokens_total += 1
        return tracker.on_token(token, context_tokens, logprob)

    def emit(self, tracker: RequestTracker, output: RequestOutput) -> None:
        """Queue ``output`` for the request's stream; a final output also removes the request."""
        if output.finished:
            self.forget(tracker.seq.request_id)
        self._dispatcher.push(tracker.stream, output)

    def end(self, tracker: RequestTracker, reason: str, error: str | None = None) -> None:
        """End the request without a new token: "abort" (client gone, shutdown) or "error" (what failed)."""
        self.emit(tracker, tracker.final_output(reason, error))

    def end_all(self, reason: str, error: str | None = None) -> None:
        """End every open request (an engine stopping or failing as a whole) and deliver at once."""
        for tracker in self.trackers():
            self.end(tracker, reason, error)
        self.flush(hold=False)

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._trackers.pop(request_id, None)

    def flush(self, hold: bool = True) -> None:
        """Hand the outputs queued since the last flush to their event loops; with ``hold`` (and a stream
        interval) a loop woken less than an interval ago gets them later, unless one is a first or last."""
        self._dispatcher.flush(hold)

    def active_requests(self, state_of: Callable[[Sequence], str] = Sequence.display_state) -> list[ActiveRequest]:
        now = time.monotonic()
        return [ActiveRequest(s.request_id, state_of(s), len(s.prompt_ids), len(s.output_ids), now - s.arrival_s)
                for s in (t.seq for t in self.trackers())]
