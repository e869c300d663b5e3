"""Where a decode step's time goes (issue 14, item 4), measured in CPU time so other processes' load hardly moves it.

    .venv/bin/python tests/bench/bench_step_cost.py [--work /tmp/edgeopt-bench-200m] [--sequences 16]

Two measurements on the ~200M Q8_0 GGUF of tests/bench/bench_serve_200m.py, with ONE llama.cpp thread
(the decode then runs on the calling thread and nothing spins at a barrier, so thread CPU time is the
work itself):

1. **KV layout**: N sequences x (32 prompt + 128 decode tokens), llama_decode CPU per step with
   per-sequence KV streams (``kv_unified=false``, llama-server's ``-np N`` layout), with one unified
   pool (edgeopt's layout, which ``llama_memory_seq_cp`` prefix sharing needs), and with the unified
   pool also holding idle cached prefixes (what a prefix cache keeps between requests). In the unified
   pool every query scans the mask of every used cell, whoever owns it.
2. **Engine step**: the real Engine over the real runtime, N greedy requests x 128 tokens: CPU of
   llama_decode vs the Python around it (scheduling, batch fill, logits copy, sampling, detokenizing,
   streaming), per step.
3. **edgeopt vs edgeopt, KV layout**: the same Engine run (prefix cache on) with ``kv_layout`` unified
   and streams, with no idle cached prefixes and with ``--idle-prefixes`` cached 1000-token prefixes
   left by earlier requests: engine-step and llama_decode CPU per generated token, side by side.

Prints both tables and the CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.engine.api import SamplingParams  # noqa: E402
from edgeopt.engine import Engine, engine_config_for  # noqa: E402
from edgeopt.runtimes.base import StepInput  # noqa: E402
from edgeopt.runtimes.llama_cpp import load_gguf  # noqa: E402
from edgeopt.runtimes.llama_cpp.batch import NumpyBatch  # noqa: E402
from tests.bench.bench_serve_200m import build_bundle  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model  # noqa: E402

PROMPT_TOKENS, DECODE_STEPS, CACHED_PREFIX_TOKENS = 32, 128, 1000
FILLER_TOKEN = 100


def _context(model: Any, unified: bool, n_seq: int, n_ctx: int) -> Any:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, 128, 128
    params.n_seq_max = params.n_outputs_max = n_seq  # llama.cpp reserves at least n_seq_max output rows
    params.kv_unified = unified
    params.n_threads = params.n_threads_batch = 1
    return llama_cpp.llama_init_from_model(model, params)


def _decode(ctx: Any, batch: NumpyBatch, inputs: list[StepInput]) -> float:
    batch.fill(inputs)
    start = time.thread_time()
    if llama_cpp.llama_decode(ctx, batch.struct) != 0:
        raise SystemExit("llama_decode failed: the benchmark's context is too small")
    return time.thread_time() - start


def _layout_run(ctx: Any, sequences: int, idle_prefixes: int) -> float:
    """Mean llama_decode CPU seconds per decode step of ``sequences`` sequences."""
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    batch = NumpyBatch(128)
    for prefix in range(idle_prefixes):  # cached prefixes: sequence ids after the running ones, never decoded
        for start in range(0, CACHED_PREFIX_TOKENS, 128):
            n = min(128, CACHED_PREFIX_TOKENS - start)
            _decode(ctx, batch, [StepInput(sequences + prefix, [FILLER_TOKEN] * n, start, False)])
    for seq in range(sequences):
        _decode(ctx, batch, [StepInput(seq, [FILLER_TOKEN] * PROMPT_TOKENS, 0, True)])
    total = sum(_decode(ctx, batch, [StepInput(seq, [FILLER_TOKEN], PROMPT_TOKENS + step, True)
                                     for seq in range(sequences)])
                for step in range(DECODE_STEPS))
    return total / DECODE_STEPS


def kv_layout_table(gguf: Path, sequences: int, idle_prefixes: int, repeats: int) -> dict[str, float]:
    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), model_params)
    per_sequence = PROMPT_TOKENS + DECODE_STEPS
    pool = sequences * per_sequence + idle_prefixes * CACHED_PREFIX_TOKENS
    variants: dict[str, tuple[Any, int]] = {
        "per-sequence streams (llama-server -np)": (_context(model, False, sequences, sequences * 256), 0),
        "unified pool (edgeopt)": (_context(model, True, sequences + idle_prefixes, pool), 0),
    }
    if idle_prefixes:
        variants[f"unified + {idle_prefixes} idle cached {CACHED_PREFIX_TOKENS}-token prefixes"] = (
            variants["unified pool (edgeopt)"][0], idle_prefixes)
    best: dict[str, float] = {}
    for _ in range(repeats):  # interleaved, best of: what is left is the work, not the neighbours
        for name, (ctx, idle) in variants.items():
            best[name] = min(best.get(name, float("inf")), _layout_run(ctx, sequences, idle))
    for ctx, _ in {id(c): (c, 0) for c, _ in variants.values()}.values():
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return best


def engine_step_table(gguf: Path, sequences: int, kv_layout: str = "unified",
                      idle_prefixes: int = 0) -> tuple[dict[str, float], int]:
    """CPU seconds per step of each part of Engine.step, over ``sequences`` greedy requests, after
    ``idle_prefixes`` requests whose 1000-token prompts stay in the prefix cache, idle."""
    context = 1024 if idle_prefixes else 256  # a stream per sequence id must hold its longest prompt
    runtime = load_gguf(gguf, kv_capacity_tokens=(sequences + idle_prefixes) * context, max_slots=sequences,
                        threads=1, n_gpu_layers=0, context_length=context, cache_slots=max(idle_prefixes, 1),
                        kv_layout=kv_layout)
    engine = Engine(runtime, engine_config_for(runtime))
    spent: dict[str, float] = collections.defaultdict(float)

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.thread_time() - start
        return wrapper

    # Instance attributes shadow the methods; llama_decode is swapped in the module for the run only.
    engine.step = timed("engine step, all of it", engine.step)  # type: ignore[method-assign]
    runtime.step = timed("runtime.step (fill, llama_decode, logits copy)", runtime.step)  # type: ignore[method-assign]
    decode = llama_cpp.llama_decode
    llama_cpp.llama_decode = timed("llama_decode", decode)
    engine._scheduler.schedule = timed("scheduler", engine._scheduler.schedule)  # type: ignore[method-assign]
    engine._sampler.sample = timed("sampling (grammar checks, redraws, logprobs)",  # type: ignore[method-assign]
                                   engine._sampler.sample)
    engine._scheduler.append_token = timed("detokenize, stop strings, stream",  # type: ignore[method-assign]
                                           engine._scheduler.append_token)
    try:
        warmup_steps = asyncio.run(_drive(engine, sequences, idle_prefixes, spent))
    finally:
        llama_cpp.llama_decode = decode
        engine.shutdown()
    steps = engine.stats().steps_total - warmup_steps
    return {name: seconds / steps for name, seconds in spent.items()}, steps


async def _drive(engine: Engine, sequences: int, idle_prefixes: int, spent: dict[str, float]) -> int:
    """Leave ``idle_prefixes`` cached prompts (their CPU not counted), then run the measured requests;
    returns the steps the former took."""
    engine.start()
    params = SamplingParams(max_tokens=DECODE_STEPS, temperature=0.0, ignore_eos=True)
    prompt = [FILLER_TOKEN] * PROMPT_TOKENS

    async def one(name: str, tokens: list[int], request: SamplingParams) -> None:
        async for _ in engine.add_request(name, tokens, request):
            pass

    one_token = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    for k in range(idle_prefixes):  # distinct first tokens: the measured prompts borrow none of them
        await one(f"idle-{k}", [FILLER_TOKEN + 1 + k] * CACHED_PREFIX_TOKENS, one_token)
    warmup_steps = engine.stats().steps_total
    spent.clear()
    await asyncio.gather(*(one(f"step-cost-{i}", prompt, params) for i in range(sequences)))
    return warmup_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-200m"))
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--idle-prefixes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    gguf = next(build_bundle(args.work, "deep").glob("*.gguf"))
    print(f"CPU: {cpu_model()}; 1 llama.cpp thread; CPU time of the decoding thread")
    layout = kv_layout_table(gguf, args.sequences, args.idle_prefixes, args.repeats)
    base = layout["per-sequence streams (llama-server -np)"]
    print(f"\nKV layout, {args.sequences} sequences x ({PROMPT_TOKENS} + {DECODE_STEPS}) tokens, "
          "llama_decode CPU per step:")
    for name, seconds in layout.items():
        print(f"  {name:<52} {1000 * seconds:7.1f} ms  {1000 * seconds / args.sequences:6.2f} ms/token  "
              f"{seconds / base:5.3f}x")
    parts, steps = engine_step_table(gguf, args.sequences)
    total = parts["engine step, all of it"]
    print(f"\nEngine.step, {args.sequences} greedy requests x {DECODE_STEPS} tokens ({steps} steps), CPU per step:")
    for name, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"  {name:<52} {1000 * seconds:7.2f} ms  {100 * seconds / total:5.1f}%")
    print(f"\nedgeopt vs edgeopt, KV layout: Engine (prefix cache on), {args.sequences} greedy requests x "
          f"{DECODE_STEPS} tokens, CPU per step (= per {args.sequences} tokens once all decode):")
    for idle in sorted({0, args.idle_prefixes}):
        runs = {layout: engine_step_table(gguf, args.sequences, layout, idle)[0] for layout in ("unified", "streams")}
        unified, streams = (runs[k]["engine step, all of it"] for k in ("unified", "streams"))
        decode_u, decode_s = (runs[k]["llama_decode"] for k in ("unified", "streams"))
        print(f"  {idle} idle cached prefixes: engine step unified {1000 * unified:7.2f} ms, streams "
              f"{1000 * streams:7.2f} ms ({streams / unified:5.3f}x); llama_decode {1000 * decode_u:7.2f} ms "
              f"vs {1000 * decode_s:7.2f} ms ({decode_s / decode_u:5.3f}x)")


if __name__ == "__main__":
    main()
