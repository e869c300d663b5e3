"""Drive a running server with N concurrent streaming completions and measure what a client sees.

Each request streams /v1/completions with ``ignore_eos`` so it produces exactly ``max_tokens`` tokens;
TTFT is request start to the first text chunk, ITL the gaps between chunks (spread over the tokens a
chunk carries), end-to-end start to ``[DONE]``. A chunk may carry several tokens (a detokenizer holding
back a partial character, a server sending text at most every few ms: ``edgeopt serve
--stream-interval-ms``); a request's tokens after its first are counted as spread evenly over its
chunks. Aggregate tokens/s is all completion tokens divided by the wall time of the whole run (prefill
included); *decode* tokens/s counts the tokens after each request's first one over the time during which
at least one request was decoding, which is the figure comparable with llama.cpp's raw batched decode
(no prefill in it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from edgeopt.bench.stats import summarize
from edgeopt.errors import BackendError

PROMPT_WORD = " hello"  # one token in byte-level BPE vocabularies; prompt_tokens reports the exact count


@dataclass
class RequestSample:
    ttft_s: float
    itl_s: list[float]
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int
    first_at: float = 0.0  # perf_counter() of the first text chunk
    end_at: float = 0.0  # perf_counter() of [DONE]

    @property
    def tokens_per_chunk(self) -> float:
        """Tokens after the first over the chunks after the first (usage counts them, chunks do not)."""
        return (self.completion_tokens - 1) / len(self.itl_s) if self.itl_s else 1.0

    def arrivals(self) -> list[float]:
        """perf_counter() of every text chunk after the first."""
        times, now = [], self.first_at
        for gap in self.itl_s:
            now += gap
            times.append(now)
        return times


def covered_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


@dataclass
class LoadResult:
    concurrency: int
    requests: int
    wall_s: float
    samples: list[RequestSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.samples)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens/s while every request of the level is decoding (no prefill in the window).

        When the requests ran side by side, the window is from the last first token to the first end
        and counts the tokens of the chunks arriving in it (each chunk weighs its request's
        ``tokens_per_chunk``); when they never all overlapped (one request at a time), it is every token
        after each first one over the time spent decoding.
        """
        decoding = [s for s in self.samples if s.completion_tokens > 1]
        if not decoding:
            return 0.0
        start, end = max(s.first_at for s in decoding), min(s.end_at for s in decoding)
        if len(decoding) > 1 and end > start:
            tokens = sum(s.tokens_per_chunk for s in decoding for t in s.arrivals() if start < t <= end)
            return tokens / (end - start)
        covered = covered_seconds([(s.first_at, s.end_at) for s in decoding])
        return sum(s.completion_tokens - 1 for s in decoding) / covered if covered > 0 else 0.0

    @property
    def decoded_tokens_per_s(self) -> float:
        """Every token after each request's first (counted from ``usage``, not from text chunks) over the
        time during which any request was decoding. Chunks undercount tokens whose bytes end mid-character
        (the detokenizer holds them back, so they share a chunk with the next): free text from a byte-level
        vocabulary sends fewer chunks per token than ASCII JSON, and a chunk count would favour the JSON."""
        decoding = [s for s in self.samples if s.completion_tokens > 1]
        covered = covered_seconds([(s.first_at, s.end_at) for s in decoding])
        return sum(s.completion_tokens - 1 for s in decoding) / covered if covered > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency, "requests": self.requests, "ok": len(self.samples),
            "errors": len(self.errors), "first_errors": self.errors[:3], "wall_s": round(self.wall_s, 3),
            "completion_tokens": self.completion_tokens, "tokens_per_s": round(self.tokens_per_s, 2),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
            "ttft": summarize([s.ttft_s for s in self.samples]),
            "itl": summarize([gap / s.tokens_per_chunk for s in self.samples for gap in s.itl_s]),
            "e2e": summarize([s.e2e_s for s in self.samples]),
        }


async def streamed_chunks(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """POST a streaming request and yield its SSE chunks as dicts; a non-200 answer or an ``error`` event
    raises BackendError with the server's message."""
    async with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            raise BackendError(f"HTTP {response.status_code}: {(await response.aread()).decode()[:200]}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise BackendError(f"stream error: {chunk['error'].get('message')}")
            yield chunk


async def one_request(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int,
                      extra_body: dict[str, Any] | None = None) -> RequestSample:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}, **(extra_body or {})}
    start = time.perf_counter()
    first: float | None = None
    last = start
    gaps: list[float] = []
    usage: dict[str, int] = {}
    async for chunk in streamed_chunks(client, "/v1/completions", body):
        now = time.perf_counter()
        usage = chunk.get("usage") or usage
        if chunk["choices"] and chunk["choices"][0]["text"]:
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
    end = time.perf_counter()
    return RequestSample(ttft_s=(first or end) - start, itl_s=gaps, e2e_s=end - start,
                         prompt_tokens=usage.get("prompt_tokens", 0),
                         completion_tokens=usage.get("completion_tokens", 0), first_at=first or end, end_at=end)


async def drive_clients(base_url: str, concurrency: int, requests: int,
                        send: Callable[[httpx.AsyncClient, int], Awaitable[None]],
                        headers: dict[str, str] | None = None) -> float:
    """Call ``send(client, i)`` for i in 0..requests-1 from ``concurrency`` closed-loop clients (at most
    that many in flight at any moment); returns the wall seconds of the whole run. ``send`` records
    its own samples and errors."""
    pending = iter(range(requests))  # shared: each request is taken by exactly one client

    async def client_loop(client: httpx.AsyncClient) -> None:
        for request in pending:
            await send(client, request)

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base_url, headers=headers or {}, limits=limits, timeout=600) as client:
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        return time.perf_counter() - start


async def run_load(base_url: str, model: str, concurrency: int, requests: int, prompt_tokens: int,
                   max_tokens: int, api_key: str | None = None, extra_body: dict[str, Any] | None = None) -> LoadResult:
    """``requests`` streamed completions, at most ``concurrency`` in flight at any moment; ``extra_body``
    adds fields to every request (e.g. a response_format)."""
    prompt = PROMPT_WORD * max(prompt_tokens, 1)
    result = LoadResult(concurrency=concurrency, requests=requests, wall_s=0.0)

    async def send(client: httpx.AsyncClient, _request: int) -> None:
        try:
            result.samples.append(await one_request(client, model, prompt, max_tokens, extra_body))
        except (httpx.HTTPError, BackendError) as exc:
            result.errors.append(str(exc))

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    result.wall_s = await drive_clients(base_url, concurrency, requests, send, headers)
    return result
