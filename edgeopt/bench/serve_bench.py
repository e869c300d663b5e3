"""The ``edgeopt bench serve`` run: one server under load at several concurrencies, the same bundle
served one request at a time (``--max-concurrency 1``), and llama.cpp's raw batched decode, with the
ratios that say what continuous batching buys and what the HTTP/engine layers cost.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from edgeopt.bench.loadgen import run_load
from edgeopt.store.bundle import Manifest, load_bundle
from edgeopt.errors import ConfigError
from edgeopt.server.startup.launcher import model_names
from edgeopt.server.startup.serve_process import launched_server


@dataclass(frozen=True)
class ServeBenchConfig:
    bundle: Path
    concurrency: tuple[int, ...] = (1, 4, 16)
    requests_per_level: int = 0  # 0: twice the concurrency (every stream runs two requests)
    prompt_tokens: int = 32
    max_tokens: int = 64
    threads: int | None = None
    memory: str | None = None
    context: int | None = None
    baseline: bool = True
    raw: bool = True
    server_args: tuple[str, ...] = field(default_factory=tuple)
    json_schema: Path | None = None  # also compare decode with and without this response_format schema

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_level or 2 * concurrency

    def serve_args(self, max_concurrency: int) -> list[str]:
        args = ["--no-verify", "--max-concurrency", str(max_concurrency), *self.server_args]
        if self.memory:
            args += ["--memory", self.memory]
        if self.context:
            args += ["--context", str(self.context)]
        return args


def _load_levels(cfg: ServeBenchConfig, model: str, max_concurrency: int, levels: tuple[int, ...],
                 report: Callable[[str], None]) -> tuple[list[dict[str, Any]], int, int]:
    """Results per level, the server's RSS after the load, and its KV capacity in tokens."""
    results = []
    with launched_server(cfg.bundle, threads=cfg.threads, extra_args=cfg.serve_args(max_concurrency)) as server:
        asyncio.run(run_load(server.base_url, model, 1, 1, cfg.prompt_tokens, 4))  # warm-up: first-touch page faults
        for level in levels:
            load = asyncio.run(run_load(server.base_url, model, level, cfg.requests_for(level), cfg.prompt_tokens,
                                        cfg.max_tokens))
            results.append(load.to_dict())
            report(f"  {level:>3} streams: {load.tokens_per_s:8.1f} tok/s, decode {load.decode_tokens_per_s:8.1f} tok/s"
                   f"  ({len(load.errors)} errors)")
        rss = psutil.Process(server.process.pid).memory_info().rss
        kv_tokens = kv_capacity_tokens(server.base_url)
    return results, rss, kv_tokens


def kv_capacity_tokens(url: str) -> int:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        if family.name == "edgeopt_kv_cache_capacity_tokens":
            return int(family.samples[0].value)
    raise ConfigError(f"{url}/metrics has no edgeopt_kv_cache_capacity_tokens", "is this an edgeopt server?")


def run_serve_bench(cfg: ServeBenchConfig, report: Callable[[str], None] = print) -> dict[str, Any]:
    if cfg.threads is None:  # server and raw decode must use the same threads for the ratio to mean anything
        from edgeopt.profiles import load_profile

        cfg = dataclasses.replace(cfg, threads=load_profile("host").cores)
    manifest = load_bundle(cfg.bundle, verify=False)
    if manifest.kind == "embedding":
        raise ConfigError(f"{cfg.bundle} is an embedding bundle; edgeopt bench serve load-tests text generation",
                          f"run edgeopt bench embed {cfg.bundle}")
    model = model_names(cfg.bundle, manifest)[0]
    top = max(cfg.concurrency)
    out: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
                           "bundle_bytes": sum(f["bytes"] for f in manifest.files.values())}
    report(f"server, --max-concurrency {top}:")
    out["server"], out["server_rss_bytes"], kv_tokens = _load_levels(cfg, model, top, cfg.concurrency, report)
    out["rss_limit_bytes"] = rss_limit(cfg.bundle, manifest, kv_tokens, out["bundle_bytes"])
    if cfg.baseline:
        report("baseline server, --max-concurrency 1 (one request at a time):")
        baseline, _, _ = _load_levels(cfg, model, 1, (top,), report)
        out["baseline"] = baseline[0]
    if cfg.raw:
        report(f"llama.cpp raw batched decode, {top} sequences:")
        out["raw"] = raw_decode(cfg, manifest, top)
        out["raw_single"] = raw_decode(cfg, manifest, 1)  # the ceiling of what batching can buy
        report(f"  {out['raw']['tokens_per_s']:8.1f} tok/s ({out['raw_single']['tokens_per_s']:.1f} for 1 sequence)")
    if cfg.json_schema is not None:
        out["json_schema"] = schema_comparison(cfg, model, top, report)
    out["ratios"] = ratios(out, top)
    return out


def schema_comparison(cfg: ServeBenchConfig, model: str, streams: int, report: Callable[[str], None]) -> dict[str, Any]:
    """Free vs response_format-constrained decode on one server (edgeopt.bench.schema_bench)."""
    from edgeopt.bench.schema_bench import compare_with_schema, read_schema

    assert cfg.json_schema is not None
    schema = read_schema(cfg.json_schema)
    report(f"constrained decoding, {streams} streams, with and without {cfg.json_schema.name}:")
    with launched_server(cfg.bundle, threads=cfg.threads, extra_args=cfg.serve_args(streams)) as server:
        result = compare_with_schema(server.base_url, model, streams, cfg.requests_for(streams), cfg.prompt_tokens,
                                     cfg.max_tokens, schema, report)
    report(f"  decode tok/s with schema / without: {result['schema_over_free']} (median of {result['round_ratios']}); "
           f"per constrained step: masks {result['mask_ms_per_step']} ms beside the forward pass, "
           f"{result['wait_ms_per_step']} ms waited for, {result['apply_ms_per_step']} ms applying them and "
           f"advancing the grammars (of which {result['redo_ms_per_step']} ms masks for the "
           f"{result['refused_per_step']} of {result['checked_per_step']} picks refused)")
    return result


RSS_ALLOWANCE_BYTES = 120 * 1000**2  # the budget for Python, HTTP and llama.cpp's compute buffers


def rss_limit(bundle: Path, manifest: Manifest, kv_tokens: int, bundle_bytes: int) -> int:
    """Bundle size + KV bytes + 120 MB: what serving this bundle may cost in resident memory."""
    from edgeopt.sizing.bundle_facts import kv_shape

    per_token, _ = kv_shape(bundle, manifest)
    return bundle_bytes + kv_tokens * per_token + RSS_ALLOWANCE_BYTES


def raw_decode(cfg: ServeBenchConfig, manifest: Manifest, sequences: int) -> dict[str, Any]:
    """llama.cpp's own batched decode on the same GGUF and thread count (edgeopt.runtimes.llama_cpp.bench)."""
    if manifest.runtime != "llama_cpp":
        raise ConfigError(f"--raw compares with llama.cpp, but this bundle runs on {manifest.runtime!r}",
                          "pass --no-raw")
    from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode

    result = raw_batched_decode(cfg.bundle / manifest.model_file, sequences, decode_steps=cfg.max_tokens,
                                prompt_tokens=cfg.prompt_tokens, threads=cfg.threads)
    return result.to_dict() | {"sequences": sequences}


def ratios(out: dict[str, Any], top: int) -> dict[str, float | None]:
    """Decode tokens/s against decode tokens/s: raw llama.cpp has no prefill, so neither side counts it."""
    at_top = next((r for r in out["server"] if r["concurrency"] == top), None)
    server_tps = at_top["decode_tokens_per_s"] if at_top else None
    baseline_tps = (out.get("baseline") or {}).get("decode_tokens_per_s")
    raw_tps = (out.get("raw") or {}).get("tokens_per_s")
    raw_single_tps = (out.get("raw_single") or {}).get("tokens_per_s")

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    return {"server_over_raw": ratio(server_tps, raw_tps),
            "server_over_one_at_a_time": ratio(server_tps, baseline_tps),
            "raw_batched_over_raw_single": ratio(raw_tps, raw_single_tps)}
