"""The async side of a request: an iterator of :class:`RequestOutput` living on the caller's event loop.

The engine thread never touches asyncio objects directly; it hands a whole step's outputs to the loop
in one call (see :class:`OutputDispatcher`), so a busy step costs the event loop one wake-up, not one
per request, and it wakes the loop without releasing the GIL (:mod:`edgeopt.engine.loop_wakeup`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

from edgeopt.engine.api import RequestOutput
from edgeopt.engine.loop_wakeup import wakeup_for


class RequestStream:
    """``async for out in stream`` yields text deltas; the last output has ``finished=True``."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop, on_close: Callable[[str], None]) -> None:
        self.request_id = request_id
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
    """Collects one step's outputs per event loop and delivers them in one thread-safe callback.

    An engine may push from two threads (the paged engine ends an aborted request on the caller's thread
    while its pump delivers tokens), hence the lock; it is held only to move list items."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, RequestOutput]]] = {}

    def push(self, stream: RequestStream, output: RequestOutput) -> None:
        with self._lock:
            self._pending.setdefault(stream.loop, []).append((stream, output))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for loop, items in pending.items():
            if loop.is_closed():  # its server is gone, nobody is listening
                continue
            wakeup = items[0][0].wakeup  # every stream of a loop has the loop's one wake-up
            if wakeup is not None:
                wakeup.post(functools.partial(_deliver, items))
                continue
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # closed meanwhile
                pass


def _deliver(items: list[tuple[RequestStream, RequestOutput]]) -> None:
    for stream, output in items:
        stream._put(output)
