"""Decode speed of llama.cpp's KV cache types side by side: f16, q8_0, q4_0 (``--kv-type``).

    .venv/bin/python tests/bench/bench_kv_type.py MODEL.gguf [--threads 1] [--steps 32] [--context 512]

Each sequence first holds ``--context`` prompt tokens, so every timed decode step attends over that many
(quantized) cells: the cost of dequantizing in flash attention shows where attention matters. Prints one
JSON line per (N, KV type) and each type's tok/s relative to f16 at the same N, measured in this one run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgeopt.runtimes.llama_cpp.bench import raw_batched_decode

KV_TYPES = ("f16", "q8_0", "q4_0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--rounds", type=int, default=3, help="Alternate the types this many times; keep the best.")
    args = parser.parse_args()
    for n in args.sequences:
        best: dict[str, float] = {}
        for _ in range(args.rounds):  # interleaved, so a burst of load elsewhere hits every type alike
            for kv_type in KV_TYPES:
                result = raw_batched_decode(args.gguf, n, decode_steps=args.steps, prompt_tokens=args.context,
                                            threads=args.threads, kv_type=kv_type)
                best[kv_type] = max(best.get(kv_type, 0.0), result.tokens_per_s)
        for kv_type in KV_TYPES:
            print(json.dumps({"n_sequences": n, "kv_type": kv_type, "context": args.context,
                              "tokens_per_s": round(best[kv_type], 1),
                              "vs_f16": round(best[kv_type] / best["f16"], 3)}))


if __name__ == "__main__":
    main()
