"""What the order of a step's sequences costs with per-sequence KV streams (``--kv-layout streams``).

    .venv/bin/python tests/bench/bench_stream_order.py [--work /tmp/edgeopt-bench-200m] [--rounds 3]

llama.cpp decodes a step over streams in one pass only when the step's sequence ids are consecutive and
increasing (runtimes/llama_cpp/stream_order.py). On the ~200M Q8_0 GGUF of tests/bench/bench_serve_200m.py,
16 sequences x 1 decode token, ONE thread (CPU time of the decoding thread, which other processes'
load hardly moves), three step shapes, each through raw ``llama_decode`` in the order given (what
the runtime did before it laid steps out) and through ``LlamaCppRuntime.step``:

* streams 0..15 in order (16 requests that started together);
* the same 16 shuffled (requests admitted at different times);
* 16 sequences with 4 holes between them (requests that finished in between).

Prints CPU ms per step and each shape's ratio to the in-order step, and the CPU model.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.runtimes.base import StepInput  # noqa: E402
from edgeopt.runtimes.llama_cpp import load_gguf  # noqa: E402
from tests.bench.bench_serve_200m import build_bundle  # noqa: E402
from tests.bench.bench_vs_llama_server import cpu_model  # noqa: E402

SEQUENCES = 16
SHAPES = {
    "in order": list(range(SEQUENCES)),
    "shuffled": random.Random(1).sample(range(SEQUENCES), SEQUENCES),
    "4 holes": [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 19],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/edgeopt-bench-200m"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="steps per shape per round")
    args = parser.parse_args()
    gguf = next(build_bundle(args.work, "deep").glob("*.gguf"))
    slots = 20
    runtime = load_gguf(gguf, kv_capacity_tokens=(slots + 1) * 512, max_slots=slots, max_batch_tokens=128, threads=1,
                        n_gpu_layers=0, cache_slots=1, context_length=512, kv_layout="streams")
    positions = {}
    for slot in range(slots):
        runtime.step([StepInput(slot, list(range(1, 33)), 0, False)])
        positions[slot] = 32

    def run(ids: list[int], raw: bool) -> float:
        batch = [StepInput(slot, [7], positions[slot], True) for slot in ids]
        start = time.thread_time()
        if raw:  # the step as given, as the runtime decoded it before laying steps out (identity names here)
            runtime._batch.fill(batch)  # noqa: SLF001 - the bench measures the unlaid-out decode on purpose
            assert llama_cpp.llama_decode(runtime._ctx, runtime._batch.struct) == 0  # noqa: SLF001
        else:
            runtime.step(batch)
        seconds = time.thread_time() - start
        for slot in ids:
            positions[slot] += 1
        return seconds * 1e3

    results: dict[tuple[str, bool], list[float]] = {(shape, raw): [] for shape in SHAPES for raw in (True, False)}
    for _ in range(args.rounds):
        for (shape, raw), times in results.items():
            times.extend(run(SHAPES[shape], raw) for _ in range(args.steps))
    runtime.close()
    print(f"CPU: {cpu_model()}, 1 thread, {SEQUENCES} sequences x 1 token, median CPU ms per step "
          f"({args.rounds} rounds x {args.steps} steps)")
    for raw, label in ((True, "llama_decode, order as given"), (False, "LlamaCppRuntime.step (laid out)")):
        base = statistics.median(results[("in order", raw)])
        cells = ", ".join(f"{shape} {statistics.median(results[(shape, raw)]):6.1f} ms "
                          f"({statistics.median(results[(shape, raw)]) / base:.2f}x)" for shape in SHAPES)
        print(f"  {label:<34} {cells}")


if __name__ == "__main__":
    main()
