"""A randomized soak: many requests of random lengths, some streamed, some deliberately bad, some
abandoned by their client mid-way. Shared by the fast default test and the slow 500-request one."""

from __future__ import annotations

import asyncio
import gc
import random
from collections import Counter
from dataclasses import dataclass, field

import httpx
import psutil

from tests.server.conftest import MODEL

INTENDED_ERRORS = {"bad_max_tokens": 400, "too_long": 400}


@dataclass
class SoakReport:
    outcomes: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    rss_after_warmup: int = 0
    rss_end: int = 0

    @property
    def rss_growth(self) -> float:
        return (self.rss_end - self.rss_after_warmup) / self.rss_after_warmup


async def _one(client: httpx.AsyncClient, rng: random.Random, context: int, report: SoakReport) -> None:
    kind = rng.choices(["ok", "stream", "stream_abort", "abort", "bad_max_tokens", "too_long"],
                       weights=[30, 30, 15, 10, 8, 7])[0]
    prompt = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(1, 120)))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": rng.randint(1, 48), "temperature": rng.random(),
            "seed": rng.randint(0, 1000)}
    if kind == "bad_max_tokens":
        body["max_tokens"] = 0
    if kind == "too_long":
        body["prompt"] = "z" * (context + 10)
    if kind in ("stream", "stream_abort"):
        body["stream"] = True
    try:
        if kind == "abort":
            await asyncio.wait_for(client.post("/v1/completions", json=body), timeout=rng.uniform(0.0, 0.05))
            report.outcomes["abort_finished_first"] += 1
            return
        if kind == "stream_abort":
            async with client.stream("POST", "/v1/completions", json=body) as r:
                stop_after = rng.randint(1, 6)
                async for i, _ in _enumerate(r.aiter_lines()):
                    if i >= stop_after:
                        break
            report.outcomes[kind] += 1
            return
        if kind == "stream":
            async with client.stream("POST", "/v1/completions", json=body) as r:
                lines = [line async for line in r.aiter_lines() if line]
            status, done = r.status_code, lines[-1:] == ["data: [DONE]"]
        else:
            r = await client.post("/v1/completions", json=body)
            status, done = r.status_code, r.status_code != 200 or "usage" in r.json()
    except asyncio.TimeoutError:
        report.outcomes["aborted"] += 1
        return
    expected = INTENDED_ERRORS.get(kind, 200)
    if status != expected or not done:
        report.unexpected.append(f"{kind}: status {status} (expected {expected}), complete={done}")
    report.outcomes[kind] += 1


async def _enumerate(lines):
    i = 0
    async for line in lines:
        yield i, line
        i += 1


async def run_soak(url: str, requests: int, concurrency: int, context: int, seed: int = 0,
                   warmup: int = 50) -> SoakReport:
    rng = random.Random(seed)
    report = SoakReport()
    process = psutil.Process()
    pending = iter(range(requests))
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def worker() -> None:
            for index in pending:
                await _one(client, rng, context, report)
                if index == warmup:
                    gc.collect()
                    report.rss_after_warmup = process.memory_info().rss

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    gc.collect()
    report.rss_end = process.memory_info().rss
    return report
