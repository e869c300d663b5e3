"""Issue-46 item 0: where one stream's decode token goes, in CPU time, on the real model (no wall clock).

    .venv/bin/python tests/bench/bench_stream_cost.py [--gguf FILE --hf-dir DIR] [--base main] [--rounds 3]

The launcher's own engine (``edgeopt serve``'s serving shape, speculation off) over the real SmolLM2-135M-Instruct
Q4_K_M (by default the one tests/bench/bench_single_stream.py makes), with ONE llama.cpp thread: the decode
then runs on the engine thread and nothing spins at a barrier, so thread CPU time is the work itself and
other processes' load hardly moves it. Requests are the single-stream bench's (a ~550-token prompt to copy,
and open chat), one at a time, 128 tokens each, at temperature 0 and 0.7, consumed on an event loop as the
server consumes them. Per completion token:

* ``decode``: CPU inside ``llama_decode`` (what llama-server spends too);
* ``engine``: the engine thread's CPU outside it (scheduling, batch fill, logits copy, sampling, detokenizer,
  stop checks, handing text to the loop);
* ``loop``: the event-loop thread's CPU (waking up, the stream's queue; no HTTP here).

Unverified (2026-11-27): on a quiet 2-core Xeon this printed 3-7 ms of ``engine`` CPU per token, while
cProfile and py-spy of the same engine put the Python around ``llama_decode`` near 0.1-0.2 ms: check how the
engine thread's CPU is attributed (the first-token reset races the engine thread) before trusting that column.

With ``--base REV`` each round runs that revision (``git archive``, as bench_engine_overhead.py does) and this
checkout alternately, each in a fresh interpreter, and prints both. Prints the CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 128
CASES = (("copy-heavy", 0.0), ("copy-heavy", 0.7), ("open-chat", 0.0), ("open-chat", 0.7))


def thread_cpu(ident: int) -> float:
    """CPU seconds of one thread of this process (any thread, not only the caller's), to the nanosecond."""
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def measure(bundle: Path, requests: int) -> dict[str, dict[str, float]]:
    """Per case: median over ``requests`` requests of CPU ms per token (runs in the child interpreter)."""
    import llama_cpp

    from edgeopt.store.bundle import load_bundle
    from edgeopt.engine.api import SamplingParams
    from edgeopt.server.startup.launcher import ServeOptions, load_served_model, serving_shape
    from tests.bench.bench_speculation_vs_llama_server import workloads

    manifest = load_bundle(bundle)
    options = ServeOptions(memory_bytes=2 << 30, threads=1, speculative="off")
    served = load_served_model(bundle, manifest, serving_shape(bundle, manifest, options), options)
    engine = served.engine
    decode_cpu = [0.0]
    decode = llama_cpp.llama_decode

    def timed_decode(ctx: Any, batch: Any) -> int:
        start = time.thread_time()
        try:
            return decode(ctx, batch)
        finally:
            decode_cpu[0] += time.thread_time() - start

    llama_cpp.llama_decode = timed_decode
    engine_thread = engine._thread.ident

    async def one(name: str, prompt: list[int], temperature: float, seed: int) -> dict[str, float]:
        params = SamplingParams(max_tokens=TOKENS, temperature=temperature, seed=seed, ignore_eos=True)
        first = True
        async for out in engine.add_request(name, prompt, params):
            if first:  # the prompt's prefill is not decode: count from the first token on
                first = False
                decode_cpu[0] = 0.0
                engine0, loop0 = thread_cpu(engine_thread), time.thread_time()
        engine_s, loop_s = thread_cpu(engine_thread) - engine0, time.thread_time() - loop0
        n = TOKENS - 1
        return {"decode": 1000 * decode_cpu[0] / n, "engine": 1000 * (engine_s - decode_cpu[0]) / n,
                "loop": 1000 * loop_s / n}

    async def run_all() -> dict[str, dict[str, float]]:
        messages = workloads()
        results: dict[str, dict[str, float]] = {}
        for workload, temperature in CASES:
            prompt = served.tokenizer.encode(served.chat_template.render(messages[workload]))
            runs = [await one(f"{workload}-{temperature}-{i}", prompt, temperature, i) for i in range(requests)]
            results[f"{workload} T{temperature}"] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        return results

    try:
        return asyncio.run(run_all())
    finally:
        llama_cpp.llama_decode = decode
        engine.shutdown()


def child(tree: str, bundle: str, requests: int) -> None:
    if tree:  # import edgeopt from that tree, not from this checkout's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f) + type(f).__module__]
        sys.path.insert(0, tree)
    sys.path.append(str(ROOT))  # `tests` (the workloads) from this checkout
    import edgeopt.engine.engine

    assert edgeopt.engine.engine.__file__.startswith(tree or str(ROOT)), edgeopt.engine.engine.__file__
    print(json.dumps(measure(Path(bundle), requests)))


def run(tree: str, bundle: Path, requests: int) -> dict[str, dict[str, float]]:
    out = subprocess.run([sys.executable, __file__, "--child", tree, str(bundle), str(requests)], check=True,
                         capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-speculation"))
    parser.add_argument("--gguf", type=Path, help="default: edgeopt's SmolLM2-135M-Instruct Q4_K_M, made once")
    parser.add_argument("--hf-dir", type=Path, help="tokenizer/config directory of --gguf (default: SmolLM2's)")
    parser.add_argument("--base", help="git revision to compare with, side by side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=3, help="requests per case and round (median)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    from edgeopt.demo.smollm2 import ensure_smollm2_checkpoint
    from tests.bench import bench_speculation_vs_llama_server as spec
    from tests.bench.bench_engine_overhead import export_tree
    from tests.bench.bench_vs_llama_server import cpu_model
    from tests.server.gguf_bundle import make_gguf_bundle

    args.work.mkdir(parents=True, exist_ok=True)
    hf_dir = args.hf_dir or ensure_smollm2_checkpoint()
    gguf = args.gguf or spec.edgeopt_q4_k_m(hf_dir, args.work / "edgeopt-q4_k_m")
    bundle = make_gguf_bundle(gguf, hf_dir, args.work / f"single-{gguf.stem}", quant=spec.gguf_quant(gguf))
    print(f"CPU: {cpu_model()}; {gguf.name}; 1 llama.cpp thread; CPU ms per decode token "
          f"(median of {args.requests} requests x {TOKENS} tokens)")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this checkout": ""}
        if args.base:
            trees = {args.base: str(export_tree(args.base, Path(tmp))), **trees}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                for case, parts in run(tree, bundle, args.requests).items():
                    print(f"round {round_ + 1} {name:<14} {case:<16} decode {parts['decode']:6.2f}  engine "
                          f"{parts['engine']:5.3f}  loop {parts['loop']:5.3f}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
