"""OutputDispatcher hands the GIL to the loop (LoopWakeup.post's hand_over_s) for a step that carries a request's
first token among a few outputs, and only then: with many streams every stream's next token would wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from edgeopt.engine import RequestOutput
from edgeopt.engine.stream import (
    FIRST_OUTPUT_HAND_OVER_MAX_OUTPUTS,
    FIRST_OUTPUT_HAND_OVER_S,
    OutputDispatcher,
    RequestStream,
)


class RecordingWakeup:
    def __init__(self) -> None:
        self.hand_overs: list[float] = []

    def post(self, call: Callable[[], None], hand_over_s: float = 0.0) -> None:
        self.hand_overs.append(hand_over_s)


def output(i: int, first: bool) -> RequestOutput:
    return RequestOutput(f"r{i}", "x", [7], completion_tokens=1 if first else 5)


def hand_overs(outputs: list[RequestOutput]) -> list[float]:
    async def body() -> list[float]:
        wakeup = RecordingWakeup()
        dispatcher = OutputDispatcher()
        loop = asyncio.get_running_loop()
        for out in outputs:
            stream = RequestStream(out.request_id, loop, on_close=lambda _: None)
            stream.wakeup = wakeup  # type: ignore[assignment]
            dispatcher.push(stream, out)
        dispatcher.flush()
        return wakeup.hand_overs

    return asyncio.run(body())


def test_a_first_token_among_few_outputs_is_handed_over() -> None:
    assert hand_overs([output(0, first=True)]) == [FIRST_OUTPUT_HAND_OVER_S]
    few = [output(0, first=True)] + [output(i, first=False) for i in range(1, FIRST_OUTPUT_HAND_OVER_MAX_OUTPUTS)]
    assert hand_overs(few) == [FIRST_OUTPUT_HAND_OVER_S]


def test_later_tokens_and_busy_steps_are_not_waited_for() -> None:
    assert hand_overs([output(0, first=False)]) == [0.0]
    many = [output(0, first=True)] + [output(i, first=False) for i in range(1, FIRST_OUTPUT_HAND_OVER_MAX_OUTPUTS + 1)]
    assert hand_overs(many) == [0.0]
    ended_empty = RequestOutput("r", "", [], finished=True, finish_reason="abort")  # no token: nothing to send soon
    assert hand_overs([ended_empty]) == [0.0]
