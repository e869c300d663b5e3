"""Randomised load on a tiny KV cache: aborts, stops, sampling and preemption must never break the
runtime contract, every stream must end exactly once, and every KV cell must come back."""

from __future__ import annotations

import asyncio
import random

from edgeopt.engine import Engine, RequestOutput, SamplingParams
from tests.engine.helpers import make_engine, run_engine
from tests.fixtures.fake_runtime import FakeRuntime


def random_params(rng: random.Random) -> SamplingParams:
    return SamplingParams(
        max_tokens=rng.randint(1, 60), temperature=rng.choice([0.0, 0.7, 1.2]), top_k=rng.choice([0, 5]),
        top_p=rng.choice([1.0, 0.9]), seed=rng.randint(0, 99), repetition_penalty=rng.choice([1.0, 1.1]),
        stop=rng.choice([[], ["e"], ["th", "an"]]), ignore_eos=rng.random() < 0.5,
    )


def test_random_load_with_aborts_on_a_tiny_cache_returns_every_cell() -> None:
    engine, runtime = make_engine(FakeRuntime(kv_capacity_tokens=160, max_slots=6, context_length=160,
                                              eos_logit=2.0), step_token_budget=48, prefill_chunk=16)
    rng = random.Random(7)

    async def client(e: Engine, i: int) -> list[RequestOutput]:
        await asyncio.sleep(rng.random() * 0.05)
        prompt = runtime.tokenizer.encode("x" * rng.randint(1, 80))
        stream = e.add_request(f"c{i}", prompt, random_params(rng))
        outputs = []
        abort_after = rng.choice([None, None, 1, 3])
        async for out in stream:
            outputs.append(out)
            if abort_after is not None and len(outputs) == abort_after and not out.finished:
                e.abort(f"c{i}")
        return outputs

    async def body(e: Engine) -> list[list[RequestOutput]]:
        results = await asyncio.gather(*(client(e, i) for i in range(40)))
        await asyncio.sleep(0.05)
        return results

    results = run_engine(engine, body)
    for outputs in results:
        assert [o.finished for o in outputs].count(True) == 1 and outputs[-1].finished
        assert outputs[-1].finish_reason in ("stop", "length", "abort")
    reasons = {o[-1].finish_reason for o in results}
    assert {"stop", "length", "abort"} <= reasons
    stats = engine.stats()
    assert stats.preemptions_total > 0 and stats.running == 0 and stats.waiting == 0
    assert stats.kv_used_tokens == 0 and runtime.kv_used_tokens == 0 and not runtime.violations
