"""The real Engine over the deterministic fake runtime: batching parity, abort, preemption, limits."""

from __future__ import annotations

import asyncio

import pytest

from edgeopt.engine import Engine, SamplingParams
from edgeopt.errors import ConfigError, ContextOverflowError, OverloadedError, RequestError
from tests.engine.helpers import generate_all, make_engine, run_engine
from tests.fixtures.fake_runtime import EOS_ID, FakeRuntime

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


def prompts(runtime: FakeRuntime, n: int) -> dict[str, list[int]]:
    return {f"r{i}": runtime.tokenizer.encode(f"request number {i}: " + "x" * (i * 7)) for i in range(n)}


def test_greedy_output_is_identical_alone_and_batched_with_15_others() -> None:
    engine, runtime = make_engine(FakeRuntime(max_slots=16))
    batch = prompts(runtime, 16)
    alone = run_engine(engine, lambda e: generate_all(e, {"r3": batch["r3"]}, GREEDY))["r3"]
    engine, runtime = make_engine(FakeRuntime(max_slots=16))
    together = run_engine(engine, lambda e: generate_all(e, batch, GREEDY), autostart=False)
    assert together["r3"].token_ids == alone.token_ids == runtime.greedy_reference(batch["r3"], 24)
    for rid, ids in batch.items():
        assert together[rid].token_ids == runtime.greedy_reference(ids, 24), rid
        assert together[rid].finish_reason == "length" and together[rid].completion_tokens == 24
        assert together[rid].text == runtime.tokenizer.decode(together[rid].token_ids)
    assert max(runtime.batch_sizes) == 16  # all sixteen really shared forward passes
    assert engine.stats().kv_used_tokens == 0 and runtime.kv_used_tokens == 0 and not runtime.violations


def test_preemption_under_tiny_kv_recomputes_and_still_matches_greedy() -> None:
    engine, runtime = make_engine(FakeRuntime(kv_capacity_tokens=96, max_slots=8, context_length=96),
                                  step_token_budget=64, prefill_chunk=16)
    batch = prompts(runtime, 6)
    params = SamplingParams(max_tokens=40, temperature=0.0)
    # All six queued before the engine starts: an idle engine started by the first would run it alone first.
    results = run_engine(engine, lambda e: generate_all(e, batch, params), autostart=False)
    stats = engine.stats()
    assert stats.preemptions_total > 0
    for rid, ids in batch.items():
        assert results[rid].token_ids == runtime.greedy_reference(ids, 40), rid
    assert stats.kv_used_tokens == 0 and runtime.kv_used_tokens == 0 and not runtime.violations
    assert max(runtime.batch_tokens) <= 64


def test_abort_frees_kv_and_ends_the_stream_with_abort() -> None:
    engine, runtime = make_engine(FakeRuntime(step_delay_s=0.01))

    async def body(e: Engine) -> None:
        stream = e.add_request("long", runtime.tokenizer.encode("abort me"), SamplingParams(max_tokens=500))
        first = await stream.__anext__()
        assert not first.finished and e.stats().kv_used_tokens > 0
        e.abort("long")
        e.abort("long")  # idempotent
        rest = [out async for out in stream]
        assert rest[-1].finished and rest[-1].finish_reason == "abort"
        await asyncio.sleep(0.05)
        assert e.stats().kv_used_tokens == 0 and e.stats().running == 0 and runtime.kv_used_tokens == 0
        e.abort("never-existed")

    run_engine(engine, body)
    assert not runtime.violations


def test_stream_aclose_aborts_the_request() -> None:
    engine, runtime = make_engine(FakeRuntime(step_delay_s=0.01))

    async def body(e: Engine) -> None:
        stream = e.add_request("gone", runtime.tokenizer.encode("hi"), SamplingParams(max_tokens=500))
        await stream.__anext__()
        await stream.aclose()
        for _ in range(100):
            if not e.active_requests():
                break
            await asyncio.sleep(0.01)
        assert e.active_requests() == [] and e.stats().kv_used_tokens == 0

    run_engine(engine, body)


def test_shutdown_ends_unfinished_streams_with_abort() -> None:
    engine, runtime = make_engine(FakeRuntime(step_delay_s=0.01))

    async def main() -> list[str | None]:
        engine.start()
        stream = engine.add_request("r", runtime.tokenizer.encode("hi"), SamplingParams(max_tokens=1000))
        await stream.__anext__()
        await asyncio.to_thread(engine.shutdown)
        return [out.finish_reason async for out in stream]

    reasons = asyncio.run(main())
    assert reasons[-1] == "abort" and runtime.closed


def test_eos_and_stop_token_ids_finish_with_stop() -> None:
    engine, runtime = make_engine(FakeRuntime(eos_logit=40.0))  # EOS wins every argmax
    ids = runtime.tokenizer.encode("anything")
    out = run_engine(engine, lambda e: generate_all(e, {"a": ids}, GREEDY))["a"]
    assert out.token_ids == [EOS_ID] and out.finish_reason == "stop" and out.text == ""

    engine, runtime = make_engine(FakeRuntime())
    first = runtime.greedy_reference(ids, 3)[2]
    params = SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=[first])
    out = run_engine(engine, lambda e: generate_all(e, {"a": ids}, params))["a"]
    assert out.finish_reason == "stop" and out.token_ids[-1] == first and len(out.token_ids) <= 3


def test_stop_string_across_token_boundaries_is_cut_and_not_emitted() -> None:
    engine, runtime = make_engine()
    ids = runtime.tokenizer.encode("stop test")
    full = runtime.tokenizer.decode(runtime.greedy_reference(ids, 24))
    stop = full[5:8]  # three one-byte tokens: always straddles token boundaries
    params = SamplingParams(max_tokens=24, temperature=0.0, stop=[stop, "never-there"])
    out = run_engine(engine, lambda e: generate_all(e, {"a": ids}, params))["a"]
    assert out.finish_reason == "stop" and out.text == full[:full.find(stop)]


def test_utf8_deltas_never_split_a_character() -> None:
    engine, runtime = make_engine(FakeRuntime(ascii_only=False, seed=3))
    ids = runtime.tokenizer.encode("bytes please")
    deltas: list[str] = []

    async def body(e: Engine) -> list[int]:
        tokens = []
        async for out in e.add_request("u", ids, SamplingParams(max_tokens=64, temperature=0.0)):
            deltas.append(out.text)
            tokens += out.token_ids
        return tokens

    tokens = run_engine(engine, body)
    raw = bytes(t for t in tokens if t < 256)
    assert "".join(deltas) == raw.decode("utf-8", errors="replace")
    assert any(t >= 128 for t in tokens)  # the test really exercised multi-byte input


def test_seeded_sampling_is_reproducible_alone_or_batched() -> None:
    params = SamplingParams(max_tokens=20, temperature=1.3, top_k=40, top_p=0.9, seed=1234)
    engine, runtime = make_engine()
    batch = prompts(runtime, 6)
    alone = run_engine(engine, lambda e: generate_all(e, {"r2": batch["r2"]}, params))["r2"]
    engine, _ = make_engine()
    together = run_engine(engine, lambda e: generate_all(e, batch, params))
    assert together["r2"].token_ids == alone.token_ids
    assert alone.token_ids != runtime.greedy_reference(batch["r2"], 20)


def test_request_validation_errors_name_the_value() -> None:
    e, runtime = make_engine(FakeRuntime(context_length=64))

    async def body() -> None:  # engine not started: requests stay queued, ids stay in flight
        with pytest.raises(ContextOverflowError, match=r"prompt \(60 tokens\) \+ max_tokens \(16\) exceeds the "
                                                       r"context \(64 tokens\)"):
            e.add_request("a", [65] * 60, SamplingParams(max_tokens=16))
        with pytest.raises(RequestError, match="empty"):
            e.add_request("b", [], SamplingParams())
        with pytest.raises(RequestError, match="max_tokens=0"):
            e.add_request("c", [65], SamplingParams(max_tokens=0))
        with pytest.raises(RequestError, match="top_p=1.5"):
            e.add_request("d", [65], SamplingParams(top_p=1.5))
        with pytest.raises(RequestError, match="token id 999"):
            e.add_request("e", [65], SamplingParams(logit_bias={999: 1.0}))
        e.add_request("dup", [65], SamplingParams(max_tokens=2))
        with pytest.raises(RequestError, match="'dup' is already in flight"):
            e.add_request("dup", [65], SamplingParams(max_tokens=2))

    asyncio.run(body())


def test_full_waiting_queue_raises_overloaded() -> None:
    engine, runtime = make_engine(FakeRuntime(max_slots=2), max_running=1, max_waiting=2)

    async def body() -> None:  # engine not started: nothing leaves the queue
        for i in range(2):
            engine.add_request(f"q{i}", [65], SamplingParams())
        with pytest.raises(OverloadedError, match="2 requests are already waiting"):
            engine.add_request("q2", [65], SamplingParams())

    asyncio.run(body())


def test_config_that_exceeds_the_runtime_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_running=32"):
        make_engine(FakeRuntime(max_slots=16), max_running=32)
    with pytest.raises(ConfigError, match="kv_capacity_tokens=9999"):
        make_engine(FakeRuntime(kv_capacity_tokens=4096), kv_capacity_tokens=9999)


def test_runtime_failure_fails_only_that_batch_and_the_engine_keeps_serving() -> None:
    class FlakyRuntime(FakeRuntime):
        fail_next = True

        def step(self, batch):  # type: ignore[no-untyped-def]
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("device lost")
            return super().step(batch)

    engine, runtime = make_engine(FlakyRuntime())

    async def body(e: Engine) -> None:
        first = await e.add_request("a", [65, 66], GREEDY).collect()
        assert first.finish_reason == "error" and "device lost" in (first.error or "")
        second = await e.add_request("b", [65, 66], GREEDY).collect()
        assert second.finish_reason == "length" and e.stats().kv_used_tokens == 0

    run_engine(engine, body)
