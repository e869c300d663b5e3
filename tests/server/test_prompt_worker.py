"""The prompt worker runs work off the event loop and refuses work past its bound with 429."""

from __future__ import annotations

import asyncio
import threading

import pytest

from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.errors import OverloadedError
from edgeopt.server.chat.prepare import prepare_chat, prepare_raw
from edgeopt.server.chat.request import ChatRequest, Function, Message, RawRequest
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.batching.prompt_worker import INLINE_PROMPT_CHARS, PromptWorker
from edgeopt.server.served_model import ServedModel
from tests.fixtures.fake_runtime import FakeRuntime


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


async def test_inline_work_runs_on_the_loop_thread_and_other_work_off_it():
    worker = PromptWorker(threads=1)
    loop_thread = threading.get_ident()
    assert await worker.run(threading.get_ident, inline=True) == loop_thread
    assert await worker.run(threading.get_ident) != loop_thread
    worker.close()


class RecordingWorker(PromptWorker):
    def __init__(self) -> None:
        super().__init__(threads=1)
        self.inline: list[bool] = []

    async def run(self, work, inline=False):  # type: ignore[no-untyped-def]
        self.inline.append(inline)
        return await super().run(work, inline)


async def test_only_a_short_unconstrained_prompt_is_prepared_on_the_loop():
    runtime = FakeRuntime(context_length=8192, kv_capacity_tokens=8192)
    served = ServedModel(context_length=8192, tokenizer=runtime.tokenizer, runtime=runtime,
                         chat_template=ChatTemplate(CHATML_TEMPLATE))
    worker = RecordingWorker()
    await prepare_raw(served, worker, RawRequest("m", "hello"))
    await prepare_raw(served, worker, RawRequest("m", "x" * (INLINE_PROMPT_CHARS + 1)))
    await prepare_chat(served, worker, ChatRequest("m", (Message("user", "hi"),)))
    await prepare_chat(served, worker, ChatRequest("m", (Message("user", "y" * (INLINE_PROMPT_CHARS + 1)),)))
    await prepare_chat(served, worker, ChatRequest("m", (Message("user", "hi"),), tools=(Function("lights_on"),)))
    assert worker.inline == [True, False, True, False, False]
    worker.close()
