"""The engine's own CPU per step against another revision's, side by side, over the fake runtime.

    .venv/bin/python tests/bench/bench_engine_overhead.py --base main [--rounds 3]

The fake runtime's forward pass costs ~0.1 ms, so what is measured is the engine thread's own work: the
scheduler, sampling, applying tokens (detokenizer, stop strings, streams). 16 requests x 128 tokens
(prompt 40), greedy and temperature 0.8 with a seed, ``Engine.step()`` driven by hand until done, CPU time
of that thread (best of 5 per process). Each round runs the base revision (``git archive`` of it, laid
out as the installed package: runtimes/profiles/exporters inside edgeopt/) and this checkout alternately,
each in a fresh interpreter; prints each round's CPU ms and the new/base ratio, and the CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUESTS, PROMPT_TOKENS, MAX_TOKENS = 16, 40, 128


def measure(mode: str) -> float:
    """Best-of-5 CPU seconds of one engine's steps (runs in the child interpreter)."""
    from edgeopt.engine import SamplingParams
    from tests.engine.helpers import make_engine

    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0 if mode == "greedy" else 0.8, seed=1,
                            ignore_eos=True)

    async def once() -> float:
        engine, _ = make_engine()
        for i in range(REQUESTS):
            engine.add_request(f"r{i}", [65 + i % 20] * PROMPT_TOKENS, params)
        engine._drain_inbox()  # queued without a thread: the steps below are the only engine work
        start = time.thread_time()
        while engine._scheduler.has_work:
            engine.step()
        spent = time.thread_time() - start
        engine.shutdown(close_runtime=False)
        return spent

    return min(asyncio.run(once()) for _ in range(5))


def child(tree: str, mode: str) -> None:
    if tree:  # import edgeopt from that tree, not from this checkout's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f) + type(f).__module__]
        sys.path.insert(0, tree)
    sys.path.append(str(ROOT))  # `tests` (the fake runtime and helpers) from this checkout
    import edgeopt.engine.engine

    assert edgeopt.engine.engine.__file__.startswith(tree or str(ROOT)), edgeopt.engine.engine.__file__
    print(measure(mode))


def export_tree(rev: str, into: Path) -> Path:
    """``rev``'s sources laid out as installed: edgeopt/ with runtimes/, profiles/, exporters/ inside."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "edgeopt", "runtimes", "profiles", "exporters"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into)
    for package in ("runtimes", "profiles", "exporters"):
        (into / package).rename(into / "edgeopt" / package)
    return into


def run(tree: str, mode: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", tree, mode], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from tests.bench.bench_vs_llama_server import cpu_model

    print(f"CPU: {cpu_model()}; engine-thread CPU ms for {REQUESTS} requests x {MAX_TOKENS} tokens, fake runtime")
    with tempfile.TemporaryDirectory() as tmp:
        base = str(export_tree(args.base, Path(tmp)))
        for mode in ("greedy", "temperature"):
            for round_ in range(args.rounds):
                old, new = run(base, mode), run("", mode)
                print(f"{mode:11s} round {round_ + 1}: {args.base} {old * 1e3:6.1f}  this checkout {new * 1e3:6.1f}"
                      f"  new/base {new / old:.2f}x")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
