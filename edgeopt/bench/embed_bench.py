"""``edgeopt bench embed``: load-test ``/v1/embeddings`` of an embedding bundle's server.

N clients post requests of ``texts_per_request`` texts of ``words`` words each, at most N in flight;
per concurrency level it reports texts/s and requests/s over the wall time of the level and the
request latency percentiles, so the gain of the server's cross-request batching shows as texts/s
rising with N while latency stays bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from edgeopt.bench.loadgen import drive_clients
from edgeopt.bench.stats import summarize
from edgeopt.store.bundle import load_bundle
from edgeopt.errors import BackendError, ConfigError
from edgeopt.server.startup.launcher import model_names
from edgeopt.server.startup.serve_process import launched_server

# Plain words, so a text of N words is about N tokens in any vocabulary (no rare pieces).
WORDS = ("the file is opened and read line by line while the server keeps a small cache of recent "
         "results so that a query for the same key returns at once").split()


@dataclass(frozen=True)
class EmbedBenchConfig:
    bundle: Path
    concurrency: tuple[int, ...] = (1, 8, 32)
    requests_per_level: int = 0  # 0: four per client
    texts_per_request: int = 1
    words: int = 24
    threads: int | None = None

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_level or 4 * concurrency


def request_texts(request: int, count: int, words: int) -> list[str]:
    """Distinct texts for each request (shifted through WORDS), so no two requests are identical."""
    return [" ".join(WORDS[(request * count + i + k) % len(WORDS)] for k in range(words)) for i in range(count)]


async def run_embed_load(base_url: str, model: str, concurrency: int, requests: int, texts_per_request: int,
                         words: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []

    async def send(client: httpx.AsyncClient, request: int) -> None:
        body = {"model": model, "input": request_texts(request, texts_per_request, words)}
        start = time.perf_counter()
        try:
            response = await client.post("/v1/embeddings", json=body)
            if response.status_code != 200:
                raise BackendError(f"HTTP {response.status_code}: {response.text[:200]}")
            latencies.append(time.perf_counter() - start)
        except (httpx.HTTPError, BackendError) as exc:
            errors.append(str(exc))

    wall = await drive_clients(base_url, concurrency, requests, send)
    return {"concurrency": concurrency, "requests": requests, "ok": len(latencies), "errors": len(errors),
            "first_errors": errors[:3], "wall_s": round(wall, 3),
            "requests_per_s": round(len(latencies) / wall, 2),
            "texts_per_s": round(len(latencies) * texts_per_request / wall, 2), "latency": summarize(latencies)}


def run_embed_bench(cfg: EmbedBenchConfig, report: Callable[[str], None] = print) -> dict[str, Any]:
    manifest = load_bundle(cfg.bundle, verify=False)
    if manifest.kind != "embedding":
        raise ConfigError(f"{cfg.bundle} is a {manifest.kind} bundle; edgeopt bench embed load-tests "
                          "/v1/embeddings", "use edgeopt bench serve for text-generation bundles")
    model = model_names(cfg.bundle, manifest)[0]
    levels = []
    with launched_server(cfg.bundle, threads=cfg.threads, extra_args=["--no-verify"]) as server:
        asyncio.run(run_embed_load(server.base_url, model, 1, 2, cfg.texts_per_request, cfg.words))  # warm-up
        for level in cfg.concurrency:
            result = asyncio.run(run_embed_load(server.base_url, model, level, cfg.requests_for(level),
                                                cfg.texts_per_request, cfg.words))
            levels.append(result)
            report(f"  {level:>3} clients: {result['texts_per_s']:8.1f} texts/s  ({result['errors']} errors)")
        rss = psutil.Process(server.process.pid).memory_info().rss
    return {"config": {"bundle": str(cfg.bundle), "texts_per_request": cfg.texts_per_request, "words": cfg.words,
                       "threads": cfg.threads},
            "levels": levels, "server_rss_bytes": rss}
