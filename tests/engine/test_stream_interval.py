"""EngineConfig.stream_interval_s: a stream's text reaches its consumer at most that often, except a request's
first and last outputs, and held text goes out before a step with prefill (a long one)."""

from __future__ import annotations

import asyncio

from edgeopt.engine import Engine, RequestOutput, SamplingParams
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

PROMPT = [5, 6, 7, 8]
PARAMS = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
HOUR = 3600.0  # longer than any test: only the first/last rule and the explicit flushes deliver


def outputs_of(engine: Engine, prompt: list[int], params: SamplingParams) -> list[RequestOutput]:
    async def body(engine: Engine) -> list[RequestOutput]:
        return [out async for out in engine.add_request("r", prompt, params)]

    return run_engine(engine, body)


def test_without_an_interval_every_token_is_its_own_output() -> None:
    engine, _ = make_engine()
    outputs = outputs_of(engine, PROMPT, PARAMS)
    assert [len(out.token_ids) for out in outputs] == [1] * 12


def test_with_an_interval_the_first_token_goes_at_once_and_the_held_ones_with_the_last() -> None:
    every, _ = make_engine()
    reference = RequestOutput.merge(outputs_of(every, PROMPT, PARAMS))
    held, _ = make_engine(stream_interval_s=HOUR)
    outputs = outputs_of(held, PROMPT, PARAMS)
    assert [len(out.token_ids) for out in outputs] == [1, 11]
    assert outputs[0].completion_tokens == 1 and not outputs[0].finished
    assert outputs[1].finished and outputs[1].finish_reason == "length" and outputs[1].completion_tokens == 12
    merged = RequestOutput.merge(outputs)
    assert (merged.text, merged.token_ids) == (reference.text, reference.token_ids)


def test_held_text_goes_out_before_a_step_with_prefill() -> None:
    """A streams with every later token held; a second request's prompt makes the next step long (prefill),
    so the first one's held text is sent before it instead of after."""
    engine, _ = make_engine(FakeRuntime(step_delay_s=0.005), stream_interval_s=HOUR)
    long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)

    async def body(engine: Engine) -> list[RequestOutput]:
        stream = engine.add_request("a", PROMPT, long)
        first = await stream.__anext__()
        await asyncio.sleep(0.1)  # ~20 tokens held
        other = engine.add_request("b", list(range(10, 60)), SamplingParams(max_tokens=1))
        second = await stream.__anext__()
        await other.collect()
        rest = [out async for out in stream]
        return [first, second, *rest]

    outputs = run_engine(engine, body)
    first, second = outputs[:2]
    assert len(first.token_ids) == 1
    assert not second.finished and len(second.token_ids) > 1  # sent before the prefill step, not with the last
    assert outputs[-1].finished and sum(len(out.token_ids) for out in outputs) == 200


def test_held_text_waits_through_drafted_steps() -> None:
    """A drafted step is barely longer than a decode: sending held text before each one woke the event loop every
    few tokens (the demo model lost 7% at one stream). Only the first and the last outputs go out."""
    from tests.engine.test_speculation import accepted, drafting_freely
    from tests.fixtures.fake_runtime import BOS_ID
    from tests.fixtures.speculation_runtimes import CopyingRuntime

    engine = drafting_freely(make_engine(CopyingRuntime(step_delay_s=0.001), speculative="ngram",
                                         stream_interval_s=HOUR)[0])
    text = "The invoice 4471 from Acme Tools lists twelve hammers. Repeat it: The invoice 4471 from"
    outputs = outputs_of(engine, [BOS_ID, *text.encode()], SamplingParams(max_tokens=40, temperature=0.0))
    drafted, _ = accepted(engine)
    assert drafted > 0
    assert len(outputs) == 2 and outputs[-1].finished
