"""Raw llama.cpp batched decode tokens/s at N=1 and N=16 on a GGUF (the issue-4 ratio baseline).

    .venv/bin/python tests/bench/bench_llama_raw.py MODEL.gguf [--threads 2] [--steps 64]

Prints one JSON line per N and the N=16 / N=1 speed-up. See runtimes/llama_cpp/bench.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    results = {}
    for n in args.sequences:
        result = raw_batched_decode(args.gguf, n, decode_steps=args.steps, threads=args.threads)
        results[n] = result.tokens_per_s
        print(json.dumps(result.to_dict()))
    if 1 in results and len(results) > 1:
        top = max(results)
        print(json.dumps({"speedup": f"N={top} vs N=1", "ratio": round(results[top] / results[1], 2)}))


if __name__ == "__main__":
    main()
