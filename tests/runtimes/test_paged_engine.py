"""The paged engine (``--runtime torch`` on CUDA) over a fake continuous-batching manager, on CPU.

The engine's own logic (streams, deltas, stop conditions, abort, failures, stats) is tested here fast and
without CUDA or transformers; tests/runtimes/test_torch_cuda.py runs it against transformers' real
manager (CPU kernels here, CUDA with ``-m cuda``).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from edgeopt.engine.api import EngineConfig, RequestOutput, SamplingParams
from edgeopt.errors import BackendError, RequestError
from edgeopt.server.app import create_app
from edgeopt.server.state import ServedModel, ServerSettings
from edgeopt.paged_batching.paged_engine import PagedEngine
from tests.fixtures.fake_batching_manager import FakeBatchingManager
from tests.fixtures.fake_runtime import FakeRuntime
from tests.server.conftest import MODEL
from tests.server.live import start_live_server
from tests.server.test_bad_input import error_of

pytestmark = pytest.mark.timeout(60)
GREEDY = SamplingParams(temperature=0, max_tokens=8)
TRIGGER = ord("~")


class FailingRuntime(FakeRuntime):
    """A forward pass that carries a "~" raises, as a CUDA fault would."""

    def step(self, batch):  # type: ignore[no-untyped-def]
        if any(TRIGGER in item.tokens for item in batch):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().step(batch)


def paged_engine(runtime: FakeRuntime, die_silently: bool = False) -> tuple[PagedEngine, FakeBatchingManager]:
    manager = FakeBatchingManager(runtime, die_silently=die_silently)
    config = EngineConfig(kv_capacity_tokens=runtime.info.kv_capacity_tokens, max_running=runtime.info.max_slots,
                          context_length=runtime.info.context_length)
    engine = PagedEngine(lambda: manager, runtime.tokenizer, runtime.info, config)
    engine.start()
    return engine, manager


async def generate(engine: PagedEngine, prompts: list[list[int]], params: SamplingParams) -> list[RequestOutput]:
    streams = [engine.add_request(f"r{i}", p, params) for i, p in enumerate(prompts)]
    return list(await asyncio.gather(*(s.collect() for s in streams)))


def test_concurrent_requests_stream_the_managers_greedy_tokens() -> None:
    runtime = FakeRuntime()
    engine, manager = paged_engine(runtime)
    prompts = [runtime.tokenizer.encode(text) for text in ("Hello", "A longer prompt here", "x")]
    try:
        outputs = asyncio.run(generate(engine, prompts, GREEDY))
        stats = engine.stats()
    finally:
        engine.shutdown()
    for prompt, out in zip(prompts, outputs):
        want = runtime.greedy_reference(prompt, GREEDY.max_tokens)
        assert out.token_ids == want and out.finish_reason == "length"
        assert out.text == runtime.tokenizer.decode(want) and out.prompt_tokens == len(prompt)
    assert stats.generated_tokens_total == 3 * GREEDY.max_tokens and stats.steps_total == manager.steps
    assert engine.active_requests() == [] and runtime.kv_used_tokens == 0


def test_a_failed_step_ends_its_requests_with_error_and_the_engine_reports_it() -> None:
    runtime = FailingRuntime()
    engine, _ = paged_engine(runtime)
    prompts = [runtime.tokenizer.encode("fine"), runtime.tokenizer.encode("boom~")]
    try:
        outputs = asyncio.run(generate(engine, prompts, GREEDY))
        # The manager stopped after the failure, as transformers' does: the engine says so and takes no more.
        assert not engine.is_running

        async def one_more() -> None:
            engine.add_request("late", prompts[0], GREEDY)

        with pytest.raises(BackendError, match="not running"):
            asyncio.run(one_more())
    finally:
        engine.shutdown()
    for out in outputs:  # both were in the failed forward pass
        assert out.finish_reason == "error", out
        assert "illegal memory access" in (out.error or "")


def test_a_manager_that_stops_without_a_word_still_ends_its_requests_with_error() -> None:
    """Before: the pump waited for results that would never come, and the client hung forever."""
    engine, _ = paged_engine(FailingRuntime(), die_silently=True)
    try:
        [out] = asyncio.run(asyncio.wait_for(generate(engine, [[256, TRIGGER]], GREEDY), timeout=10))
    finally:
        engine.shutdown()
    assert out.finish_reason == "error" and "manager stopped" in (out.error or "")
    assert engine.failure and not engine.is_running


def test_a_stop_string_ends_the_request_and_cancels_it_in_the_manager() -> None:
    runtime = FakeRuntime()
    prompt = runtime.tokenizer.encode("Hello")
    text = runtime.tokenizer.decode(runtime.greedy_reference(prompt, 8))
    engine, manager = paged_engine(runtime)
    try:
        [out] = asyncio.run(generate(engine, [prompt], SamplingParams(temperature=0, max_tokens=8, stop=[text[3:5]])))
    finally:
        engine.shutdown()
    assert out.finish_reason == "stop" and out.text == text[:text.index(text[3:5])]
    assert manager.cancelled == ["r0"] and runtime.kv_used_tokens == 0


def test_a_client_that_leaves_aborts_its_request_in_the_manager() -> None:
    runtime = FakeRuntime(step_delay_s=0.01)
    engine, manager = paged_engine(runtime)

    async def leave_after_first_token() -> RequestOutput:
        stream = engine.add_request("gone", [256, 72], SamplingParams(temperature=0, max_tokens=500))
        first = await stream.__anext__()
        await stream.aclose()
        return first

    try:
        first = asyncio.run(leave_after_first_token())
        assert manager.cancelled == ["gone"] and engine.active_requests() == []
    finally:
        engine.shutdown()
    assert not first.finished and runtime.kv_used_tokens == 0


def test_what_the_manager_cannot_honour_is_refused_before_anything_is_queued() -> None:
    engine, manager = paged_engine(FakeRuntime())

    async def hot() -> None:
        engine.add_request("hot", [256, 72], SamplingParams(temperature=0.7))

    try:
        with pytest.raises(RequestError, match="temperature=0.7"):
            asyncio.run(hot())
        assert engine.active_requests() == [] and manager.usage().running == 0
    finally:
        engine.shutdown()


def test_a_failed_paged_step_reaches_the_client_as_a_500_not_a_200() -> None:
    runtime = FailingRuntime()
    engine, _ = paged_engine(runtime)
    served = ServedModel(context_length=engine.context_tokens, tokenizer=runtime.tokenizer, engine=engine,
                         runtime=runtime)
    live = start_live_server(create_app(ServerSettings(model_names=(MODEL,)), served=served))
    try:
        body = {"model": MODEL, "prompt": "boom~", "max_tokens": 4, "temperature": 0}
        failed = httpx.post(f"{live.url}/v1/completions", json=body, timeout=30)
        assert failed.status_code == 500, failed.text
        assert "illegal memory access" in error_of(failed)["message"]
        health = httpx.get(f"{live.url}/health", timeout=30)
        assert health.status_code == 503 and "not running" in health.json()["error"]
    finally:
        live.stop()
        engine.shutdown()


def test_shutdown_ends_open_requests_with_abort() -> None:
    engine, _ = paged_engine(FakeRuntime(step_delay_s=0.01))

    async def shut_down_mid_generation() -> RequestOutput:
        stream = engine.add_request("open", [256, 72], SamplingParams(temperature=0, max_tokens=500))
        await stream.__anext__()
        await asyncio.to_thread(engine.shutdown)
        return await stream.collect()

    out = asyncio.run(shut_down_mid_generation())
    assert out.finish_reason == "abort" and out.error is None
