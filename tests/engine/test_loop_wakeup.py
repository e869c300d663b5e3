"""LoopWakeup: calls posted from another thread run on the loop in order, and posting keeps the GIL."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time

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


def test_a_hand_over_returns_once_the_loop_ran_the_call_and_what_it_woke() -> None:
    """post(..., hand_over_s): the engine waits until the task the call woke (the stream writing the first
    token) has run, so that the first token is not sent after the next forward pass's start."""
    events: list[str] = []

    async def body() -> None:
        loop = asyncio.get_running_loop()
        wakeup = wakeup_for(loop)
        assert wakeup is not None
        woken: asyncio.Future[None] = loop.create_future()

        async def consumer() -> None:
            await woken
            events.append("task ran")

        task = asyncio.create_task(consumer())
        await asyncio.sleep(0)  # the consumer waits on the future

        def post() -> None:
            wakeup.post(lambda: woken.set_result(None), hand_over_s=30.0)
            events.append("post returned")

        poster = threading.Thread(target=post)
        poster.start()
        await task
        await asyncio.to_thread(poster.join, 10)

    asyncio.run(body())
    assert events == ["task ran", "post returned"]


def test_a_hand_over_is_bounded_and_never_waits_on_the_loop_itself() -> None:
    async def body() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        wakeup = wakeup_for(loop)
        assert wakeup is not None
        started = time.monotonic()
        wakeup.post(lambda: None, hand_over_s=30.0)  # on the loop's thread: it could never run the call
        on_loop = time.monotonic() - started
        blocked = threading.Event()
        loop.call_soon(lambda: (blocked.set(), time.sleep(1.0)))  # a loop busy for a second

        def post_to_busy_loop() -> float:
            blocked.wait(5)
            t = time.monotonic()
            wakeup.post(lambda: None, hand_over_s=0.05)
            return time.monotonic() - t

        waited = await asyncio.to_thread(post_to_busy_loop)
        return on_loop, waited

    on_loop, waited = asyncio.run(body())
    assert on_loop < 1.0 and waited < 0.9
