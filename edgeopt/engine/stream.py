"""The async side of a request: an iterator of :class:`RequestOutput` living on the caller's event loop.

The engine thread never touches asyncio objects directly; it hands a whole step's outputs to the loop
in one call (see :class:`OutputDispatcher`), so a busy step costs the event loop one wake-up, not one
per request, and it wakes the loop without releasing the GIL (:mod:`edgeopt.engine.loop_wakeup`), except
for a step that carries a request's first token among a few outputs: then the engine waits for the loop to
send it before the next forward pass (~1 ms less to the first token on one stream).

When tokens come faster than ``interval_s`` (a lone stream on a fast device), the dispatcher wakes the
loop at most that often and the stream hands its consumer everything that arrived as one output: the
waking, the SSE framing and the write then happen once per interval instead of once per token. That
work runs on the cores the forward pass uses: on a 2-core CPU, one stream of a ~200M GGUF (~10 ms a
token), a 50 ms interval made `edgeopt serve` decode 5% faster (paired rounds against the same server
waking every token). A request's first output and its last are never held, so TTFT and the end of a
reply are not delayed; a token waits at most one interval (or one forward pass, if that is longer).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import Callable

from edgeopt.engine.loop_wakeup import wakeup_for
from edgeopt.engine.request_output import RequestOutput

# The longest the engine waits for its loop to send a step's first tokens (edgeopt.engine.loop_wakeup): the
# loop's turn takes ~0.3 ms for one output on a 2-core CPU; a loop busier than this is not waited for.
FIRST_OUTPUT_HAND_OVER_S = 0.002
# ... and only when the step has this many outputs for the loop at most: the turn grows with them (~0.1 ms
# each), and with many streams decoding a newcomer's first token is a small part of its wait, while every
# stream's next token would wait through the hand-over.
FIRST_OUTPUT_HAND_OVER_MAX_OUTPUTS = 4


class RequestStream:
    """``async for out in stream`` yields text deltas; the last output has ``finished=True``."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop, on_close: Callable[[str], None],
                 coalesce: bool = False) -> None:
        self.request_id = request_id
        self.coalesce = coalesce  # outputs that arrived together reach the consumer as one
        self.loop = loop
        self.wakeup = wakeup_for(loop)  # made here, on the loop's thread (None: call_soon_threadsafe instead)
        self._queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._on_close = on_close  # aborts the request if the consumer leaves before the end
        self.finished = False

    def _put(self, output: RequestOutput) -> None:
        self._queue.put_nowait(output)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        output = await self._queue.get()
        if self.coalesce and not _urgent(output) and not self._queue.empty():
            # (a first output stays alone: its time is the request's TTFT, the rest are inter-token gaps)
            outputs = [output]
            while not self._queue.empty() and not outputs[-1].finished:
                outputs.append(self._queue.get_nowait())
            output = RequestOutput.merge(outputs)
        if output.finished:
            self.finished = True
        return output

    async def aclose(self) -> None:
        """Stop listening; a request still generating is aborted (frees its KV)."""
        if not self.finished:
            self._on_close(self.request_id)

    async def collect(self) -> RequestOutput:
        """Wait for the end and return one merged output (for non-streaming responses)."""
        outputs = [out async for out in self]
        assert outputs and outputs[-1].finished
        return RequestOutput.merge(outputs)


class OutputDispatcher:
    """Collects one step's outputs per event loop and delivers them in one thread-safe callback, at most
    every ``interval_s`` per loop unless an output is a request's first or last (see the module docstring).

    An engine may push from two threads (the paged engine ends an aborted request on the caller's thread
    while its pump delivers tokens), hence the lock; it is held only to move list items."""

    def __init__(self, interval_s: float = 0.0) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, RequestOutput]]] = {}
        self._last_wake: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = weakref.WeakKeyDictionary()

    def push(self, stream: RequestStream, output: RequestOutput) -> None:
        with self._lock:
            self._pending.setdefault(stream.loop, []).append((stream, output))

    def flush(self, hold: bool = True) -> None:
        """Deliver what is due; ``hold=False`` delivers everything (the engine is about to idle or to run a
        long step, so nothing else would come soon)."""
        now = time.monotonic()
        with self._lock:
            pending = {loop: items for loop, items in self._pending.items()
                       if not hold or self._due(loop, items, now)}
            for loop in pending:
                del self._pending[loop]
                self._last_wake[loop] = now
        for loop, items in pending.items():
            if loop.is_closed():  # its server is gone, nobody is listening
                continue
            wakeup = items[0][0].wakeup  # every stream of a loop has the loop's one wake-up
            if wakeup is not None:
                hand_over = len(items) <= FIRST_OUTPUT_HAND_OVER_MAX_OUTPUTS and any(_first(o) for _, o in items)
                wakeup.post(functools.partial(_deliver, items), FIRST_OUTPUT_HAND_OVER_S if hand_over else 0.0)
                continue
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # closed meanwhile
                pass

    def _due(self, loop: asyncio.AbstractEventLoop, items: list[tuple[RequestStream, RequestOutput]],
             now: float) -> bool:
        return (now - self._last_wake.get(loop, float("-inf")) >= self._interval_s  # a loop never woken is due
                or any(_urgent(output) for _, output in items))


def _urgent(output: RequestOutput) -> bool:
    """A request's last output, or its first (every token it carries is new: TTFT waits for nothing)."""
    return output.finished or output.completion_tokens <= len(output.token_ids)


def _first(output: RequestOutput) -> bool:
    """An output carrying a request's first token."""
    return 0 < output.completion_tokens <= len(output.token_ids)


def _deliver(items: list[tuple[RequestStream, RequestOutput]]) -> None:
    for stream, output in items:
        stream._put(output)
