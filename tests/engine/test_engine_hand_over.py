"""An idle engine has started a new request's forward pass by the time add_request returns (the event loop
waits for it, handing it the GIL); an engine inside a step is never waited for."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import edgeopt.engine.inbox as inbox_module
from edgeopt.engine import Engine, SamplingParams
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

GREEDY = SamplingParams(max_tokens=2, temperature=0.0)


class HeldRuntime(FakeRuntime):
    """Every forward pass waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def step(self, batch):  # type: ignore[no-untyped-def]
        self.gate.wait(30)
        return super().step(batch)


async def until_idle(engine: Engine) -> None:
    deadline = time.monotonic() + 10
    while not engine._inbox.idle:  # the hint the hand-over reads
        assert time.monotonic() < deadline, "the engine thread never went idle"
        await asyncio.sleep(0.01)


def test_an_idle_engine_is_stepping_when_add_request_returns_and_a_busy_one_is_not_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inbox_module, "HAND_OVER_WAIT_S", 30.0)  # a slow host cannot make it time out
    engine, runtime = make_engine(HeldRuntime())

    async def body(e: Engine) -> None:
        await until_idle(e)
        first = e.add_request("a", [65, 66], GREEDY)
        # Without the hand-over the loop keeps the GIL and the engine could not have scheduled yet.
        assert e._stepping.is_set()
        started = time.monotonic()
        second = e.add_request("b", [65, 67], GREEDY)  # the engine is held inside the first step
        assert time.monotonic() - started < 5
        runtime.gate.set()
        outputs = await asyncio.gather(first.collect(), second.collect())
        assert [o.finish_reason for o in outputs] == ["length", "length"]

    run_engine(engine, body)
