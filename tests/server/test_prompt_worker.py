"""The prompt worker runs work off the event loop and refuses work past its bound with 429."""

from __future__ import annotations

import asyncio
import threading

import pytest

from edgeopt.errors import OverloadedError
from edgeopt.server.prompt_worker import PromptWorker


async def test_a_flood_beyond_the_bound_is_refused_not_queued():
    worker = PromptWorker(threads=1, max_pending=2)
    release = threading.Event()
    loop_thread = threading.get_ident()
    ran_on: list[int] = []

    def blocked() -> str:
        ran_on.append(threading.get_ident())
        release.wait(10)
        return "done"

    first = asyncio.create_task(worker.run(blocked))
    second = asyncio.create_task(worker.run(blocked))
    await asyncio.sleep(0.05)
    with pytest.raises(OverloadedError) as refused:
        await worker.run(blocked)
    assert refused.value.status_code == 429 and "limit is 2" in refused.value.message
    release.set()
    assert await asyncio.gather(first, second) == ["done", "done"]
    assert worker.pending == 0 and loop_thread not in ran_on
    assert await worker.run(lambda: 7) == 7  # capacity is back once the work is done
    worker.close()
