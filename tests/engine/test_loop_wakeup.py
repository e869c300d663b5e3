"""LoopWakeup: calls posted from another thread run on the loop in order, and posting keeps the GIL."""

from __future__ import annotations

import asyncio
import ctypes
import threading

from edgeopt.engine import loop_wakeup
from edgeopt.engine.loop_wakeup import wakeup_for


def test_posted_calls_run_on_the_loop_in_order() -> None:
    async def body() -> tuple[list[int], set[int]]:
        loop = asyncio.get_running_loop()
        wakeup = wakeup_for(loop)
        assert wakeup is not None and wakeup_for(loop) is wakeup
        seen: list[int] = []
        threads: set[int] = set()
        done = asyncio.Event()

        def call(i: int) -> None:
            seen.append(i)
            threads.add(threading.get_ident())
            if i == 499:
                done.set()

        poster = threading.Thread(target=lambda: [wakeup.post(lambda i=i: call(i)) for i in range(500)])
        poster.start()
        await asyncio.wait_for(done.wait(), 5)
        poster.join()
        return seen, threads

    seen, threads = asyncio.run(body())
    assert seen == list(range(500)) and threads == {threading.main_thread().ident}


def test_the_wakeup_write_keeps_the_gil() -> None:
    """ctypes releases the GIL around a CDLL call; a PyDLL call keeps it: that is the point of the module."""
    assert loop_wakeup._WRITE is not None
    assert loop_wakeup._WRITE._flags_ & ctypes._FUNCFLAG_PYTHONAPI
