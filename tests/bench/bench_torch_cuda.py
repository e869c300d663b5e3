"""Generation throughput of a torch bundle (paged CUDA engine, or our engine on CPU) against a GGUF bundle
of the same model on llama.cpp, both through the Engine API the server uses.

    .venv/bin/python tests/bench/bench_torch_cuda.py TORCH_BUNDLE [--gguf GGUF_BUNDLE] [--device cuda]
        [--concurrency 1 16] [--max-tokens 128] [--threads 2]

Prints one JSON line per (backend, concurrency): completion tokens/s over all requests, wall seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from edgeopt.bundle import load_bundle
from edgeopt.engine import Engine, SamplingParams, engine_config_for
from runtimes import load_runtime

PROMPT = "def parse_arguments(argv):\n    "
KV_TOKENS = 16 * 512


def make_engine(bundle: Path, device: str, threads: int, slots: int) -> Any:
    manifest = load_bundle(bundle)
    options: dict[str, Any] = {"kv_capacity_tokens": KV_TOKENS, "max_slots": slots, "context_length": 512,
                               "threads": threads}
    if manifest.runtime == "torch":
        options["device"] = device
    runtime = load_runtime(manifest.runtime, bundle, manifest, **options)
    config = engine_config_for(runtime, kv_capacity_tokens=KV_TOKENS, max_running=slots, context_length=512)
    engine = runtime.create_engine(config) or Engine(runtime, config)
    engine.start()
    return engine, runtime


async def generate(engine: Any, prompt_ids: list[int], concurrency: int, max_tokens: int) -> int:
    # No ignore_eos: transformers 4.5x continuous batching cannot honour it; tokens/s counts what was generated.
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    streams = [engine.add_request(f"bench-{time.monotonic_ns()}-{i}", prompt_ids, params) for i in range(concurrency)]
    outputs = [await s.collect() for s in streams]
    return sum(o.completion_tokens for o in outputs)


def measure(label: str, bundle: Path, device: str, threads: int, concurrency: int, max_tokens: int) -> dict:
    engine, runtime = make_engine(bundle, device, threads, max(concurrency, 1))
    try:
        prompt_ids = runtime.tokenizer.encode(PROMPT, add_special=True)
        asyncio.run(generate(engine, prompt_ids, 1, 8))  # warm-up: kernels, allocator, CUDA graphs
        started = time.perf_counter()
        tokens = asyncio.run(generate(engine, prompt_ids, concurrency, max_tokens))
        seconds = time.perf_counter() - started
    finally:
        engine.shutdown()
    return {"backend": label, "concurrency": concurrency, "completion_tokens": tokens,
            "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("torch_bundle", type=Path)
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF bundle of the same model (llama.cpp)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for n in args.concurrency:
        print(json.dumps(measure(f"torch:{args.device}", args.torch_bundle, args.device, args.threads, n,
                                 args.max_tokens)), flush=True)
        if args.gguf:
            print(json.dumps(measure("llama_cpp", args.gguf, args.device, args.threads, n, args.max_tokens)),
                  flush=True)


if __name__ == "__main__":
    main()
