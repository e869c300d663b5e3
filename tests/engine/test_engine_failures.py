"""No request can stop the engine: a failure in scheduling, the runtime, sampling or detokenizing ends the
requests of that step with finish_reason="error", the others go on, and the next request is served
(issue 12, item 1: one sampler IndexError used to kill the engine thread for good)."""

from __future__ import annotations

import asyncio

import pytest

from edgeopt.engine import Engine, SamplingParams
from edgeopt.engine import step_sampler as sampler_module
from edgeopt.engine.outputs import RequestTracker
from edgeopt.errors import BackendError, RequestError
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime

GREEDY = SamplingParams(max_tokens=4, temperature=0.0)
PROMPT = [72, 101, 108, 108, 111]  # "Hello"


async def serves_normally(e: Engine) -> None:
    out = await e.add_request("after", PROMPT, GREEDY).collect()
    assert out.finish_reason == "length" and len(out.token_ids) == 4
    assert e.is_running and e.stats().kv_used_tokens == 0 and e.stats().running == 0


async def good_and_bad_in_the_same_steps(e: Engine):  # noqa: ANN201 - (good, bad) RequestOutputs
    """Queue "good" and "bad" before the engine starts, so that they share every step; collect both."""
    good, bad = e.add_request("good", PROMPT, GREEDY), e.add_request("bad", PROMPT, GREEDY)
    e.start()
    return await asyncio.gather(good.collect(), bad.collect())


def test_the_issue_request_finishes_and_the_engine_keeps_serving() -> None:
    """The exact parameters of issue 12 item 1, straight into the engine (no server in front)."""
    engine, runtime = make_engine()

    async def body(e: Engine) -> None:
        tiny = SamplingParams(max_tokens=5, temperature=5e-324, min_p=0.1)
        out = await e.add_request("tiny-temp", PROMPT, tiny).collect()
        assert out.finish_reason == "length" and out.token_ids == runtime.greedy_reference(PROMPT, 5), out
        # Outside its range (edgeopt.engine.validation): refused up front; the sampler would survive it too
        # (test_sampler_properties), but it is no penalty any more, only overflow.
        with pytest.raises(RequestError, match=r"repetition_penalty=5e-324 .*\[0.01, 100\]"):
            e.add_request("tiny-penalty", PROMPT, SamplingParams(max_tokens=5, repetition_penalty=5e-324, min_p=0.05))
        await serves_normally(e)

    run_engine(engine, body)
    assert runtime.violations == []


def test_a_raising_sampler_fails_only_its_request(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler_module.sample_next_tokens

    def sampler(logits, seqs, allowed=None):  # type: ignore[no-untyped-def]
        if any(s.request_id == "bad" for s in seqs):
            raise FloatingPointError("sampler blew up")
        return real(logits, seqs, allowed)

    monkeypatch.setattr(sampler_module, "sample_next_tokens", sampler)
    engine, _ = make_engine()

    async def body(e: Engine) -> None:
        good_out, bad_out = await good_and_bad_in_the_same_steps(e)
        assert bad_out.finish_reason == "error" and "FloatingPointError: sampler blew up" in (bad_out.error or "")
        assert good_out.finish_reason == "length" and len(good_out.token_ids) == 4
        await serves_normally(e)

    run_engine(engine, body, autostart=False)


def test_a_raising_detokenizer_fails_only_its_request(monkeypatch: pytest.MonkeyPatch) -> None:
    real = RequestTracker.on_token

    def on_token(self: RequestTracker, token: int, context_tokens: int, *rest):  # type: ignore[no-untyped-def]
        if self.seq.request_id == "bad" and len(self.seq.output_ids) == 2:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "detokenizer blew up")
        return real(self, token, context_tokens, *rest)

    monkeypatch.setattr(RequestTracker, "on_token", on_token)
    engine, _ = make_engine()

    async def body(e: Engine) -> None:
        good_out, bad_out = await good_and_bad_in_the_same_steps(e)
        assert bad_out.finish_reason == "error" and "detokenizer blew up" in (bad_out.error or "")
        assert good_out.finish_reason == "length"
        await serves_normally(e)

    run_engine(engine, body, autostart=False)


def test_a_raising_scheduler_fails_its_requests_and_a_fresh_one_takes_over() -> None:
    engine, runtime = make_engine()
    real_schedule = engine._scheduler.schedule
    calls = {"n": 0}

    def schedule():  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:  # mid-generation: both requests hold KV in the runtime
            raise AssertionError("scheduler invariant broken")
        return real_schedule()

    engine._scheduler.schedule = schedule  # type: ignore[method-assign]

    async def body(e: Engine) -> None:
        streams = [e.add_request(r, PROMPT, GREEDY) for r in ("a", "b")]
        e.start()
        outs = await asyncio.gather(*(s.collect() for s in streams))
        assert [o.finish_reason for o in outs] == ["error", "error"]
        assert "scheduler invariant broken" in (outs[0].error or "")
        assert runtime.kv_used_tokens == 0  # the runtime's slots were emptied for the fresh scheduler
        await serves_normally(e)

    run_engine(engine, body, autostart=False)
    assert runtime.violations == []


def test_a_raising_runtime_fails_its_step_and_the_next_request_is_served() -> None:
    class ExplodingRuntime(FakeRuntime):
        def step(self, batch):  # type: ignore[no-untyped-def]
            if self.steps == 1:
                self.steps += 1
                raise MemoryError("out of device memory")
            return super().step(batch)

    engine, runtime = make_engine(ExplodingRuntime())

    async def body(e: Engine) -> None:
        out = await e.add_request("a", PROMPT, GREEDY).collect()
        assert out.finish_reason == "error" and "MemoryError" in (out.error or "")
        await serves_normally(e)

    run_engine(engine, body)


class _Fatal(BaseException):
    """Stands for what no engine code may swallow and go on (an interpreter shutdown, say)."""


def test_a_dead_engine_thread_ends_its_streams_with_error_and_refuses_new_requests() -> None:
    class FatalRuntime(FakeRuntime):
        def step(self, batch):  # type: ignore[no-untyped-def]
            raise _Fatal("interpreter is going away")

    engine, _ = make_engine(FatalRuntime())

    async def body(e: Engine) -> None:
        out = await e.add_request("a", PROMPT, GREEDY).collect()
        assert out.finish_reason == "error" and "interpreter is going away" in (out.error or "")
        e._thread.join(timeout=10)  # type: ignore[union-attr]
        assert not e.is_running and "_Fatal" in (e.failure or "")
        with pytest.raises(BackendError, match="engine thread is not running"):
            e.add_request("b", PROMPT, GREEDY)

    run_engine(engine, body)
