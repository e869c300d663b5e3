"""Drive a real Engine over the fake runtime from synchronous tests (each test owns its event loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from edgeopt.engine import Engine, EngineConfig, RequestOutput, SamplingParams
from tests.fixtures.fake_runtime import FakeRuntime

T = TypeVar("T")


def make_engine(runtime: FakeRuntime | None = None, **config: float) -> tuple[Engine, FakeRuntime]:
    runtime = runtime or FakeRuntime()
    defaults = dict(kv_capacity_tokens=runtime.info.kv_capacity_tokens, max_running=runtime.info.max_slots,
                    context_length=runtime.info.context_length)
    defaults.update(config)
    return Engine(runtime, EngineConfig(**defaults)), runtime


def run_engine(engine: Engine, body: Callable[[Engine], Awaitable[T]], autostart: bool = True) -> T:
    """Start the engine (unless ``body`` will), run ``body`` on a fresh loop, always shut the engine down."""

    async def main() -> T:
        if autostart:
            engine.start()
        try:
            return await asyncio.wait_for(body(engine), timeout=60)
        finally:
            engine.shutdown(close_runtime=False)

    return asyncio.run(main())


async def generate_all(engine: Engine, prompts: dict[str, list[int]], params: SamplingParams) -> dict[str, RequestOutput]:
    """Queue every prompt, then start the engine if it is not running yet (so they all start together)."""
    streams = {rid: engine.add_request(rid, ids, params) for rid, ids in prompts.items()}
    if not engine.is_running:
        engine.start()
    results = await asyncio.gather(*(s.collect() for s in streams.values()))
    return dict(zip(streams, results))
